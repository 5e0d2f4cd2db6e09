"""ZeRO-Offload / ZeRO-Infinity and activation offload, as tasks on the copy and host streams.

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
- ``offload_activations``: a micro-batch's stored activations of a stage are copied to the host
  after its forward and back, prefetched one action ahead, before its backward.

Copies are tasks of op class ``pcie_to_host`` / ``pcie_to_device`` (bytes over PCIe),
``nvme_read`` / ``nvme_write`` (bytes at the NVMe tier) and ``cpu_adam`` (bytes of DRAM traffic
of the CPU Adam step, ``CPU_ADAM_BYTES_PER_PARAM`` per parameter); the simulator prices them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedules.actions import Action
from schedules.memory import ADAM_STATE_BYTES, stage_activation_bytes
from schedules.taskgraph import Op, Task

if TYPE_CHECKING:
    from schedules.builder import Coords, TaskGraphBuilder

HOST_OP_CLASSES = ("pcie_to_host", "pcie_to_device", "nvme_read", "nvme_write", "cpu_adam")
CPU_ADAM_BYTES_PER_PARAM = 28
"""DRAM traffic of one parameter's CPU Adam update: fp32 master weight, momentum and variance read
and written (24 bytes), the bf16 gradient read (2) and the bf16 parameter written (2)."""
ACT_TO_HOST, ACT_TO_DEVICE = "act d2h", "act h2d"


class OffloadTasks:
    """Emits the host-side tasks of ZeRO-Offload/Infinity for a :class:`TaskGraphBuilder`."""

    def __init__(self, builder: TaskGraphBuilder) -> None:
        self.b = builder
        plan = builder.plan
        self.params_offloaded = plan.offload == "params"
        self.nvme = plan.offload_device == "nvme"
        self.elem = plan.element_bytes

    def _add(self, c: Coords, step: int, lane: str, kind: str, name: str, op_class: str, size: float,
             deps: list[int], a: Action | None = None, layer: int = -1) -> int:
        op = Op(lane, kind, name, op_class, bytes=size, layer=layer)
        stage, chunk, mb = (-1, -1, -1) if a is None else (a.stage, a.chunk, a.microbatch)
        task = Task(rank=self.b.rank(c), lane=lane, kind=kind, name=name, ops=(op,), step=step,
                    stage=stage, chunk=chunk, microbatch=mb, layer=layer)
        return self.b.graph.add(task, deps)

    def grads_to_host(self, c: Coords, step: int, a: Action, shard_params: float, after: int) -> int:
        """Copy a reduced gradient shard (``shard_params`` parameters) to the host."""
        return self._add(c, step, "memcpy", "offload", "grad d2h", "pcie_to_host",
                         self.elem * shard_params, [after], a)

    def fetch_params(self, c: Coords, step: int, a: Action, shard_params: float, after: int,
                     layer: int) -> int:
        """ZeRO-Infinity: bring a layer's parameter shard to the device before its all-gather."""
        deps = [after]
        if self.nvme:
            deps = [self._add(c, step, "host", "offload", "param nvme read", "nvme_read",
                              self.elem * shard_params, deps, a, layer)]
        return self._add(c, step, "memcpy", "offload", "param h2d", "pcie_to_device",
                         self.elem * shard_params, deps, a, layer)

    def optimizer_step(self, c: Coords, step: int, shard_params: float, deps: list[int]) -> int:
        """CPU Adam over the rank's shard (NVMe read/write around it with ``nvme``), then the
        updated bf16 parameters back to the device (not with params offload). Returns the task
        the next step waits for."""
        states = ADAM_STATE_BYTES * shard_params
        if self.nvme:
            deps = [self._add(c, step, "host", "offload", "optimizer nvme read", "nvme_read", states, deps)]
        adam = self._add(c, step, "host", "optimizer", "cpu adam", "cpu_adam",
                         CPU_ADAM_BYTES_PER_PARAM * shard_params, deps)
        last = adam
        if self.nvme:
            last = self._add(c, step, "host", "offload", "optimizer nvme write", "nvme_write", states, [adam])
        if self.params_offloaded:
            return last
        h2d = self._add(c, step, "memcpy", "offload", "param h2d", "pcie_to_device",
                        self.elem * shard_params, [adam])
        return h2d if last == adam else self._join(c, step, [h2d, last])

    def _join(self, c: Coords, step: int, deps: list[int]) -> int:
        """A zero-length task after all of ``deps`` (the step ends when they all have)."""
        op = Op("host", "other", "offload join", "fixed", duration_s=0.0)
        return self.b.graph.add(Task(rank=self.b.rank(c), lane="host", kind="other", name="offload join",
                                     ops=(op,), step=step), deps)


class ActivationOffload:
    """Copies each micro-batch's activations to the host after its forward and back before its
    backward (prefetched: the copy back may start once the action before the previous one ended)."""

    def __init__(self, builder: TaskGraphBuilder) -> None:
        self.b = builder
        self.to_host: dict[tuple[int, int, int, int], int] = {}  # (rank, step, stage, mb) -> copy
        self.action_ends: dict[int, list[int]] = {}

    def _bytes(self, a: Action) -> float:
        return stage_activation_bytes(self.b.model, self.b.plan, self.b.stages[a.stage])

    def before_action(self, c: Coords, step: int, a: Action) -> list[int]:
        """Extra dependencies of action ``a``'s first block: the copy back of its activations."""
        rank = self.b.rank(c)
        d2h = self.to_host.pop((rank, step, a.stage, a.microbatch), -1)
        if a.phase != "B" or d2h < 0:
            return []
        ends = self.action_ends.get(rank, [])
        prefetch_after = ends[-2] if len(ends) >= 2 else -1
        op = Op("memcpy", "offload", ACT_TO_DEVICE, "pcie_to_device", bytes=self._bytes(a))
        task = Task(rank=rank, lane="memcpy", kind="offload", name=ACT_TO_DEVICE, ops=(op,), step=step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch)
        return [self.b.graph.add(task, [d2h, prefetch_after])]

    def after_action(self, c: Coords, step: int, a: Action, last_id: int) -> None:
        """After a forward, copy its activations to the host; remember where the action ended."""
        rank = self.b.rank(c)
        self.action_ends.setdefault(rank, []).append(last_id)
        if a.phase != "F":
            return
        op = Op("memcpy", "offload", ACT_TO_HOST, "pcie_to_host", bytes=self._bytes(a))
        task = Task(rank=rank, lane="memcpy", kind="offload", name=ACT_TO_HOST, ops=(op,), step=step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch)
        self.to_host[(rank, step, a.stage, a.microbatch)] = self.b.graph.add(task, [last_id])
