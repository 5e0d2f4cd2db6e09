"""Data parallelism as the included trainer runs it (framework="torch"): FSDP2 units under
``torch.distributed.pipelining``.

The trainer wraps each transformer block in its own unit and the stage module (embedding, final
norm, head) in a root unit, with ``fully_shard`` (ZeRO-2: parameters kept unsharded after
forward; ZeRO-3: resharded) or ``replicate`` (ZeRO-0, and ZeRO-1 with a sharded optimizer).
Seen in its traces (torch 2.13, gloo) and in ``pipelining/stage.py``:

- Gradient reduction is deferred to the stage's ``REDUCE_GRAD`` (``perform_reduce_grad``),
  right after its last backward: unit by unit (root first), a post-backward copy of the unit's
  gradients on the compute stream (``fsdp::chunk_cat`` and a copy: 4 passes over them), then
  its all-reduce (replicate) or reduce-scatter (FSDP), which the next unit waits for (FSDP2
  keeps one reduction in flight; on CPUs it is done before the next copy starts). Then (with several
  micro-batches, and also without DP) the gradients are divided by the number of
  micro-batches, unit by unit (``scale_grads``).
- ZeRO-2/3 gather a unit's parameters right before the unit computes, when they are sharded
  (no prefetch in forward on CPUs; in backward the next block's gather is issued when a block
  starts, so it overlaps that block's compute, except where collectives block their caller:
  gloo's all-gather without ``async_op``, as FSDP2's prefetch issues it, returns when done, so
  on CPU hosts the block starts after it; ``BuildOptions.gloo_host``), then copy them out of the gathered buffer on
  the compute stream (``foreach_all_gather_copy_out``: 2 passes over the unit's parameters). In
  backward the wait for the gather happens in the block's pre-backward hook, inside an autograd
  function: the trace shows it as compute, and so does the model (the copy-out spans the wait). A unit is sharded at the start of the step; after a forward ZeRO-3
  reshards it; after a backward that is not the last it stays unsharded; ``REDUCE_GRAD``
  reshards it. So ZeRO-2 gathers once per step, ZeRO-3 before every backward and every forward
  that follows a forward.
- The optimizer (AdamW) steps unit by unit over the rank's parameters: all of them (ZeRO-0),
  the owned 1/N (ZeRO-1), or the 1/N shards (ZeRO-2/3), as torch's single-tensor loop (no
  foreach kernels on CPUs: ``EAGER_ADAMW_PASSES`` over each parameter). ZeRO-1 then broadcasts each DP rank's
  updated parameters to the others (``profiler/trainer/zero1.py``, per DP rank: every rank
  flattens the owner's parameters into a new buffer, a blocking broadcast, a copy back).
- CPU offload (``plan.offload="optimizer"``, FSDP2's ``CPUOffloadPolicy``, ZeRO-2/3): the
  sharded parameters, gradients and optimizer states live in host memory. Before each
  all-gather the unit's parameter shard is copied host -> device (``param h2d``), after each
  reduce-scatter its gradient shard device -> host (``grad d2h``), both "offload" tasks in the
  ``memcpy`` lane priced as PCIe transfers on GPUs and as host memory copies at the DRAM
  bandwidth on a CPU host (``pcie_to_device``/``pcie_to_host``, see :mod:`sim.host_pricing`);
  the optimizer steps on the host (``cpu_adam``, ``host`` lane) after the last gradient copy,
  and nothing is copied back: the next all-gather fetches the updated shard. On a CPU device
  torch does not copy at all (``Tensor.to("cpu")`` returns the host tensor) and the "host"
  optimizer is the same cores' optimizer: the simulator prices those copies at zero and the
  host optimizer as the device's (:meth:`sim.pricing.TaskCoster._on_host_device`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedules.actions import Action
from schedules.dp_tasks import DataParallelTasks
from schedules.offload import CPU_ADAM_BYTES_PER_PARAM
from schedules.stage_ops import EAGER_ADAMW_PASSES
from schedules.stages import StageInfo
from schedules.taskgraph import Op, Task

if TYPE_CHECKING:
    from schedules.builder import Coords

ROOT = -1  # unit id of the stage's root (embedding, final norm, head)
POST_BACKWARD_TOUCHES = 4  # reads+writes of a unit's gradient bytes in FSDP's post-backward copy/scale
COPY_OUT_TOUCHES = 2  # read the gathered buffer, write the unsharded parameters
COPY_IN_TOUCHES = 2  # read the parameter shard, write it into the all-gather buffer
# Buffers the copies write that are freshly allocated (first touch: page faults on a CPU host,
# op class "alloc"), in units of the bytes they cover; read off the torch 2.13 traces:
# replicate's post-backward writes two new unit-sized buffers (fsdp::chunk_cat, then a copy_),
# fully_shard's one (fsdp::chunk_cat; the reduce-scatter's own copy is inside the collective);
# the copy-in writes its shard into a new all-gather buffer (whose other shards the all-gather
# itself writes first). The copy-out (``fsdp::split_with_sizes_copy``, 3-5 ms per 11.8 MB block,
# the streaming time) finds the unsharded parameters' storage, re-allocated at the same size after
# every reshard, already touched.
POST_BACKWARD_FRESH = {"replicate": 2, "fully_shard": 1}


class TorchDataParallelTasks(DataParallelTasks):
    """The trainer's DP/ZeRO tasks; same hooks as :class:`DataParallelTasks` plus ``after_action``."""

    def __init__(self, builder) -> None:  # type: ignore[no-untyped-def]
        super().__init__(builder)
        self.bytes = builder.plan.element_bytes
        self.sharded: dict[tuple[int, int, int], bool] = {}  # (rank, stage, unit) -> sharded now
        self.backwards: dict[tuple[int, int, int], int] = {}  # (rank, step, stage) -> backwards done
        self.pending: dict[tuple[int, int], list[int]] = {}  # (rank, step) -> reductions
        self.issued: dict[tuple[int, int, int], int] = {}  # (rank, stage, unit) -> gather not copied out yet
        self.host_offload = self.offload is not None and self.active and self.zero >= 2  # FSDP2 CPUOffloadPolicy

    # ---- units ----
    def _units(self, stage: StageInfo) -> list[tuple[int, float]]:
        """(unit, parameters) of a stage: the root (if it holds any) then the blocks in order."""
        root = stage.embedding_params_local + stage.head_params_local
        units = [(ROOT, root)] if root > 0 else []
        return units + [(layer, stage.layer_params_local) for layer in stage.layers]

    def blocks_for(self, stage: StageInfo, a: Action) -> list[tuple[int, ...]]:
        """One block per layer with ZeRO-2/3 (each unit gathers before it computes), else one."""
        layers = stage.layers if a.phase == "F" else tuple(reversed(stage.layers))
        if self.active and self.zero >= 2 and layers:
            return [(layer,) for layer in layers]
        return [layers] if layers else [()]

    # ---- gathers ----
    def before_block(self, c: Coords, step: int, stage: StageInfo, a: Action,
                     layers: tuple[int, ...], prev_block: int) -> int:
        """ZeRO-2/3: gather the (root and) block's units that are sharded, and copy them out of
        the gathered buffer on the compute stream; in backward (ZeRO-3) also prefetch the next
        block's gather. Returns the last copy-out (the block waits for it), or -1."""
        if not (self.active and self.zero >= 2 and a.phase in ("F", "B")):
            return -1
        order = stage.layers if a.phase == "F" else tuple(reversed(stage.layers))
        first_block = layers[:1] == order[:1]
        units = dict(self._units(stage))
        wanted = ([ROOT] if first_block and ROOT in units else []) + [u for u in layers if u in units]
        for unit in wanted:
            self._gather(c, step, stage, a, unit, units[unit])
        prefetch = -1
        if a.phase == "B" and self.zero == 3 and layers:
            nxt = order.index(layers[-1]) + 1
            if nxt < len(order):
                prefetch = self._gather(c, step, stage, a, order[nxt], units[order[nxt]])
        last = -1
        rank = self.b.rank(c)
        for unit in wanted:
            gather = self.issued.pop((rank, stage.index, unit), None)
            if gather is not None:
                label = "root" if unit == ROOT else f"L{unit}"
                kind = "fwd" if a.phase == "F" else "bwd"
                op = Op("compute", kind, f"{label}.param_copy", "elementwise",
                        bytes=COPY_OUT_TOUCHES * self.bytes * units[unit], layer=unit)
                task = Task(rank=rank, lane="compute", kind=kind, name=op.name, ops=(op,), step=step,
                            stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=unit)
                if a.phase == "F":
                    last = self.b.add_compute(task, [gather])
                else:  # the pre-backward hook runs inside autograd: it waits for the gather in a compute span
                    last = self.b.add_compute(task, [])
                    self.b.graph.add_hold(last, gather)
        if prefetch >= 0 and self.b.options.gloo_host:
            # gloo: the prefetch's all-gather (no async_op) returns when done, inside the hook
            label = "root" if order[nxt] == ROOT else f"L{order[nxt]}"
            # one op's dispatch for the hook itself; the span stretches over the wait, as traced
            op = Op("compute", "bwd", f"{label}.prefetch_wait", "elementwise", bytes=0.0, layer=order[nxt])
            last = self.b.add_compute(Task(rank=rank, lane="compute", kind="bwd", name=op.name, ops=(op,),
                                           step=step, stage=a.stage, chunk=a.chunk, microbatch=a.microbatch,
                                           layer=order[nxt]), [])
            self.b.graph.add_hold(last, prefetch)
        return last

    def _gather(self, c: Coords, step: int, stage: StageInfo, a: Action, unit: int, params: float) -> int:
        """Issue the all-gather of ``unit`` after the rank's latest compute, if it is sharded;
        returns its task id, or -1 when nothing was issued."""
        rank = self.b.rank(c)
        key = (rank, stage.index, unit)
        if not self.sharded.get(key, True) or key in self.issued:
            return -1
        label = "root" if unit == ROOT else f"L{unit}"
        after = self.b.last_compute.get(rank, -1)
        if self.host_offload and self.offload is not None:  # the shard comes from host memory first
            after = self.offload.fetch_params(c, step, a, params / self.shard, after, unit)
        kind = "fwd" if a.phase == "F" else "bwd"
        shard_bytes = self.bytes * params / self.shard
        ops = (Op("compute", kind, f"{label}.param_copy_in", "elementwise", bytes=COPY_IN_TOUCHES * shard_bytes,
                  layer=unit),
               Op("compute", kind, f"{label}.param_copy_in.alloc", "alloc", bytes=shard_bytes, layer=unit))
        copy_in = self.b.add_compute(Task(rank=rank, lane="compute", kind=kind, name=ops[0].name, ops=ops,
                                          step=step, stage=a.stage, chunk=a.chunk, microbatch=a.microbatch,
                                          layer=unit), [after] if after >= 0 else [])
        # the rest of the new all-gather buffer is first written by the collective itself
        fill = (Op("comm.dp", "all_gather", f"{label}.param_ag.alloc", "alloc", dim="dp", layer=unit,
                   bytes=self.bytes * params - shard_bytes),)
        self.issued[key] = self._collective(c, step, "all_gather", f"{label}.param_ag", self.bytes * params,
                                            [copy_in], a, layer=unit, before=fill)
        self.sharded[key] = False
        return self.issued[key]

    def after_block(self, c: Coords, step: int, stage: StageInfo, a: Action,
                    layers: tuple[int, ...], block_id: int) -> None:
        """Track the units' state: ZeRO-3 reshards a unit after its forward."""
        if self.active and self.zero == 3 and a.phase == "F":
            rank = self.b.rank(c)
            for unit, _ in self._units(stage):
                if unit in layers or unit == ROOT:
                    self.sharded[(rank, stage.index, unit)] = True

    def step_start_gathers(self, c: Coords, step: int, prev_end: int) -> dict[int, list[int]]:
        """No gathers at the step start: units gather lazily before they compute."""
        return {}

    # ---- reduction ----
    def after_action(self, c: Coords, step: int, a: Action, last_id: int) -> None:
        """After the stage's last backward-like action: REDUCE_GRAD, unit by unit, then the
        gradients' division by the number of micro-batches (``scale_grads``)."""
        if a.phase != self.grad_phase:
            return
        rank = self.b.rank(c)
        key = (rank, step, a.stage)
        self.backwards[key] = self.backwards.get(key, 0) + 1
        m = self.b.plan.num_microbatches
        if self.backwards[key] < m:
            return
        stage = self.b.stages[a.stage]
        if self.active:
            self._reduce(c, step, a, stage)
        if m > 1:
            share = self.shard if (self.active and self.zero >= 2) else 1
            ops = tuple(Op("compute", "bwd", f"{'root' if u == ROOT else f'L{u}'}.grad_scale", "elementwise",
                           bytes=2 * self.bytes * params / share, layer=u) for u, params in self._units(stage))
            self.b.add_compute(Task(rank=rank, lane="compute", kind="bwd", name="grad_scale", ops=ops,
                                    step=step, stage=a.stage, chunk=a.chunk), [])

    def _reduce(self, c: Coords, step: int, a: Action, stage: StageInfo) -> None:
        """Each unit's post-backward copy, then its all-reduce / reduce-scatter (asynchronous)."""
        rank = self.b.rank(c)
        kind = "all_reduce" if self.zero <= 1 else "reduce_scatter"
        red = -1
        for unit, params in self._units(stage):
            label = "root" if unit == ROOT else f"L{unit}"
            grad_bytes = self.bytes * params
            op = Op("compute", "bwd", f"{label}.post_backward", "elementwise",
                    bytes=POST_BACKWARD_TOUCHES * grad_bytes, layer=unit)
            wrapper = "replicate" if self.zero <= 1 else "fully_shard"
            fresh = Op("compute", "bwd", f"{label}.post_backward.alloc", "alloc",
                       bytes=POST_BACKWARD_FRESH[wrapper] * grad_bytes, layer=unit)
            post = self.b.add_compute(Task(rank=rank, lane="compute", kind="bwd", name=op.name, ops=(op, fresh),
                                           step=step, stage=a.stage, chunk=a.chunk, layer=unit),
                                      [red] if red >= 0 else [])
            name = f"{label}.grad_{'ar' if kind == 'all_reduce' else 'rs'}"
            clone: tuple[Op, ...] = ()
            if kind == "reduce_scatter" and self.b.options.gloo_host:  # gloo all-reduces a new copy
                clone = (Op("comm.dp", kind, f"{name}.clone", "alloc", bytes=grad_bytes, dim="dp", layer=unit),)
            red = self._collective(c, step, kind, name, grad_bytes, [post], a, layer=unit, before=clone)
            done = red
            if self.host_offload and self.offload is not None:  # the reduced shard goes to host memory
                done = self.offload.grads_to_host(c, step, a, params / self.shard, red)
            self.pending.setdefault((rank, step), []).append(done)
            if self.zero >= 2:
                self.sharded[(rank, stage.index, unit)] = True

    # ---- optimizer ----
    def step_end(self, c: Coords, step: int, extra_deps: list[int] | None = None) -> int:
        """AdamW unit by unit after every reduction; ZeRO-1 then broadcasts the updated shards."""
        rank = self.b.rank(c)
        deps = self.pending.pop((rank, step), []) + list(extra_deps or [])
        share = self.shard if (self.active and self.zero >= 1) else 1
        stages = [self.b.stages[self.b.schedule.stage_of(c.pp, ch)] for ch in range(self.b.schedule.vpp)]
        if self.host_offload:
            return self._host_optimizer(c, step, stages, deps)
        ops = tuple(Op("compute", "optimizer", f"optimizer.{'root' if u == ROOT else f'L{u}'}", "optimizer",
                       bytes=EAGER_ADAMW_PASSES * self.bytes * params / share)
                    for stage in stages for u, params in self._units(stage))
        opt = self.b.add_compute(Task(rank=rank, lane="compute", kind="optimizer", name="optimizer",
                                      ops=ops, step=step), deps)
        if not (self.active and self.zero == 1):
            return opt
        shard_bytes = self.bytes * sum(stage.params_local for stage in stages) / self.shard
        last = opt
        for owner in range(self.shard):
            a = Action(stage=stages[0].index, phase="F", microbatch=-1, chunk=0)
            flatten = (Op("compute", "optimizer", f"param_flatten dp{owner}", "elementwise",
                          bytes=COPY_IN_TOUCHES * shard_bytes),
                       Op("compute", "optimizer", f"param_flatten dp{owner}.alloc", "alloc", bytes=shard_bytes))
            flat = self.b.add_compute(Task(rank=rank, lane="compute", kind="optimizer", name=flatten[0].name,
                                           ops=flatten, step=step), [last])
            bcast = self._collective(c, step, "broadcast", f"param_bcast from dp{owner}", shard_bytes, [flat], a)
            unflatten = Op("compute", "optimizer", f"param_unflatten dp{owner}", "elementwise",
                           bytes=COPY_OUT_TOUCHES * shard_bytes)
            last = self.b.add_compute(Task(rank=rank, lane="compute", kind="optimizer", name=unflatten.name,
                                           ops=(unflatten,), step=step), [bcast])
        return last

    def _host_optimizer(self, c: Coords, step: int, stages: list[StageInfo], deps: list[int]) -> int:
        """CPU offload: the optimizer steps on the host over the rank's shards, unit by unit,
        after the last gradient copy; nothing goes back (the next all-gathers fetch the shards).
        Where the ranks are CPU processes (``gloo_host``) the host is the device: the step is the
        rank's own compute (its compute stream, on the node's cores), as its trace shows it."""
        lane = "compute" if self.b.options.gloo_host else "host"
        ops = tuple(Op(lane, "optimizer", f"optimizer.{'root' if u == ROOT else f'L{u}'}", "cpu_adam",
                       bytes=CPU_ADAM_BYTES_PER_PARAM * params / self.shard)
                    for stage in stages for u, params in self._units(stage))
        task = Task(rank=self.b.rank(c), lane=lane, kind="optimizer", name="cpu optimizer", ops=ops, step=step)
        if lane == "compute":
            return self.b.add_compute(task, deps)
        return self.b.graph.add(task, deps)
