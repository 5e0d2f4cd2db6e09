"""ZeRO-Offload / ZeRO-Infinity (and FSDP2's CPU offload) tasks on the copy and host streams.

What runs where (Ren et al. 2021, ZeRO-Offload; Rajbhandari et al. 2021, ZeRO-Infinity; DeepSpeed):

- ``offload="optimizer"``: the fp32 master weights and Adam's momentum and variance (12 bytes
  per parameter of the rank's ZeRO shard) live on the host (CPU DRAM, or NVMe with
  ``offload_device="nvme"``). Each gradient bucket, once reduced, is copied device -> host on
  the copy stream (``memcpy`` lane) while the backward goes on; after the last copy the CPU runs
  Adam over the shard (``host`` lane); the updated bf16 parameters are copied host -> device,
  and the ZeRO-1/2 all-gathers (or ZeRO-3's per-layer gathers) follow as without offload.
- with ``offload_device="nvme"`` the optimizer states are read from NVMe before the CPU step
  and written back after it (ZeRO-Infinity), NVMe traffic also crossing DRAM.
- ``offload="params"`` (ZeRO-Infinity, ZeRO-3 only): the bf16 parameter shards live on the host
  too; each layer's shard is copied host -> device (after an NVMe read with ``nvme``) before its
  all-gather, and the updated shard is not copied back after the step.

Copies are tasks of op class ``pcie_to_host`` / ``pcie_to_device`` (bytes over PCIe),
``nvme_read`` / ``nvme_write`` (bytes at the NVMe tier) and ``cpu_adam`` (bytes of DRAM traffic
of the CPU Adam step, ``CPU_ADAM_BYTES_PER_PARAM`` per parameter); the simulator prices them.
The functions here make the tasks; the data-parallel passes decide when they run.
"""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, Offload, OffloadDevice, OpClass
from schedules.actions import Action
from schedules.memory import ADAM_STATE_BYTES, gradient_buffer_bytes
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from schedules.passes.program import BuildContext, Coords, Dep, Emit, Key, Point


def host_task(ctx: BuildContext, c: Coords, step: int, lane: Lane, kind: Kind, name: str, op_class: OpClass,
              size: float, a: Action | None = None, layer: int = -1) -> Task:
    """One copy or host computation of ``size`` bytes (labelled with action ``a``, if any)."""
    op = Op(lane, kind, name, op_class, bytes=size, layer=layer)
    stage, chunk, mb = (-1, -1, -1) if a is None else (a.stage, a.chunk, a.microbatch)
    return Task(rank=ctx.rank(c), lane=lane, kind=kind, name=name, ops=(op,), step=step, stage=stage,
                chunk=chunk, microbatch=mb, layer=layer)


def grads_to_host(ctx: BuildContext, c: Coords, step: int, point: Point, key: Key, a: Action,
                  shard_params: float, after: Dep) -> Emit:
    """Copy a reduced gradient shard (``shard_params`` parameters, in the gradient buffer's dtype:
    :func:`schedules.memory.gradient_buffer_bytes`) to the host."""
    task = host_task(ctx, c, step, Lane.MEMCPY, Kind.OFFLOAD, "grad d2h", OpClass.PCIE_TO_HOST,
                     gradient_buffer_bytes(ctx.plan) * shard_params, a)
    return Emit(point, task, key, (after,))


def fetch_params(ctx: BuildContext, c: Coords, step: int, point: Point, key: Key, a: Action,
                 shard_params: float, after: Dep | None, layer: int) -> list[Emit]:
    """ZeRO-Infinity / FSDP2 offload: bring a layer's parameter shard to the device (after an NVMe
    read with ``nvme``) before its all-gather; the last emit carries ``key``."""
    size = ctx.plan.element_bytes * shard_params
    deps: tuple[Dep, ...] = () if after is None else (after,)
    out = []
    if ctx.plan.offload_device == OffloadDevice.NVME:
        read = host_task(ctx, c, step, Lane.HOST, Kind.OFFLOAD, "param nvme read", OpClass.NVME_READ, size, a, layer)
        out.append(Emit(point, read, (*_tuple(key), "nvme"), deps))
        deps = ((*_tuple(key), "nvme"),)
    h2d = host_task(ctx, c, step, Lane.MEMCPY, Kind.OFFLOAD, "param h2d", OpClass.PCIE_TO_DEVICE, size, a, layer)
    return [*out, Emit(point, h2d, key, deps)]


def optimizer_step(ctx: BuildContext, c: Coords, step: int, point: Point, key: Key, shard_params: float,
                   deps: tuple[Dep, ...]) -> tuple[list[Emit], Key]:
    """CPU Adam over the rank's shard (``key``; NVMe read/write around it with ``nvme``), then
    the updated bf16 parameters back to the device (not with params offload). Returns the tasks
    and the key of the one the next step waits for."""
    base = _tuple(key)
    states = ADAM_STATE_BYTES * shard_params
    nvme = ctx.plan.offload_device == OffloadDevice.NVME
    out: list[Emit] = []
    if nvme:
        read = host_task(ctx, c, step, Lane.HOST, Kind.OFFLOAD, "optimizer nvme read", OpClass.NVME_READ, states)
        out.append(Emit(point, read, (*base, "read"), deps))
        deps = ((*base, "read"),)
    adam = host_task(ctx, c, step, Lane.HOST, Kind.OPTIMIZER, "cpu adam", OpClass.CPU_ADAM,
                     CPU_ADAM_BYTES_PER_PARAM * shard_params)
    out.append(Emit(point, adam, key, deps))
    last: Key = key
    if nvme:
        write = host_task(ctx, c, step, Lane.HOST, Kind.OFFLOAD, "optimizer nvme write", OpClass.NVME_WRITE, states)
        last = (*base, "write")
        out.append(Emit(point, write, last, (key,)))
    if ctx.plan.offload == Offload.PARAMS:
        return out, last
    h2d = host_task(ctx, c, step, Lane.MEMCPY, Kind.OFFLOAD, "param h2d", OpClass.PCIE_TO_DEVICE,
                    ctx.plan.element_bytes * shard_params)
    out.append(Emit(point, h2d, (*base, "h2d"), (key,)))
    if last == key:
        return out, (*base, "h2d")
    op = Op(Lane.HOST, Kind.OTHER, "offload join", OpClass.FIXED, duration_s=0.0)
    join = Task(rank=ctx.rank(c), lane=Lane.HOST, kind=Kind.OTHER, name="offload join", ops=(op,), step=step)
    out.append(Emit(point, join, (*base, "join"), ((*base, "h2d"), last)))
    return out, (*base, "join")


def _tuple(key: Key) -> tuple[object, ...]:
    return key if isinstance(key, tuple) else (key,)
