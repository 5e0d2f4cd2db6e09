"""Data-parallel and ZeRO communication, and the optimizer step, as tasks.

What each ZeRO stage does (the group is the DP x CP group, as Megatron-LM shards over it):

- ZeRO-0 (DDP): gradients accumulate locally over the micro-batches; during the last micro-batch's
  backward they are all-reduced in buckets as each bucket's gradients are ready (overlapped with
  the rest of the backward when ``overlap_grad_reduce``), then every rank runs the full Adam step.
- ZeRO-1 (Megatron's distributed optimizer): the same, with reduce-scatter instead of
  all-reduce; each rank updates its 1/N shard and the updated bf16 parameters are all-gathered —
  at the start of the next step, bucket by bucket before each chunk's first forward when
  ``overlap_param_gather``, else right after the optimizer step.
- ZeRO-2 (DeepSpeed): gradients stay sharded, so every micro-batch's backward reduce-scatters its
  buckets; parameters are all-gathered after the update as for ZeRO-1.
- ZeRO-3 (DeepSpeed / FSDP): parameters are sharded too: each layer's parameters are all-gathered
  before its forward and again before its backward, one layer ahead (prefetch), on every
  micro-batch; its gradients are reduce-scattered right after its backward.

Gradients and gathered parameters travel in bf16 (2 bytes per parameter; 4 in fp32 plans).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from schedules.actions import Action
from schedules.offload import OffloadTasks
from schedules.stages import StageInfo
from schedules.taskgraph import Op, Task

if TYPE_CHECKING:
    from schedules.builder import Coords, TaskGraphBuilder

GRAD_BYTES = 2
PARAM_BYTES = 2


class DataParallelTasks:
    """Emits the DP/ZeRO tasks of a :class:`TaskGraphBuilder` (one instance per build)."""

    def __init__(self, builder: TaskGraphBuilder) -> None:
        self.b = builder
        plan = builder.plan
        self.shard = plan.dp * plan.cp
        self.zero = plan.zero if self.shard > 1 else 0
        self.active = self.shard > 1
        self.grad_phase = "W" if builder.split else "B"
        self.last_mb = plan.num_microbatches - 1
        self.elem = plan.element_bytes
        self.reductions: dict[tuple[int, int], list[int]] = {}
        self.recent_blocks: dict[int, list[int]] = {}
        self.offload = OffloadTasks(builder) if plan.offload != "none" else None

    # ---- blocks ----
    def blocks_for(self, stage: StageInfo, a: Action) -> list[tuple[int, ...]]:
        """Layer blocks of one pass, in execution order (reverse for backward)."""
        layers = stage.layers if a.phase == "F" else tuple(reversed(stage.layers))
        if not layers:
            return [()]
        if self.active and self.zero == 3:
            return [(layer,) for layer in layers]
        if self._reduces_after(a):
            per_bucket = max(1, int(self.b.plan.dp_bucket_bytes // (self.elem * stage.layer_params_local)))
            return [layers[i:i + per_bucket] for i in range(0, len(layers), per_bucket)]
        return [layers]

    def _reduces_after(self, a: Action) -> bool:
        """Does this pass produce gradients that are reduced right away (bucket by bucket)?"""
        if not self.active or a.phase != self.grad_phase:
            return False
        return self.zero >= 2 or a.microbatch == self.last_mb

    def _block_params(self, stage: StageInfo, layers: tuple[int, ...]) -> float:
        params = len(layers) * stage.layer_params_local
        if stage.first and stage.layers and stage.layers[0] in layers:
            params += stage.embedding_params_local
        if stage.last and stage.layers and stage.layers[-1] in layers:
            params += stage.head_params_local
        return params

    # ---- per block hooks ----
    def before_block(self, c: Coords, step: int, stage: StageInfo, a: Action,
                     layers: tuple[int, ...], prev_block: int) -> int:
        """ZeRO-3: all-gather this layer's parameters, prefetched one layer ahead. Returns its id."""
        fetch = self.offload is not None and self.offload.params_offloaded
        if not ((self.active and self.zero == 3 or fetch) and a.phase in ("F", "B")):
            return -1
        recent = self.recent_blocks.setdefault(self.b.rank(c), [])
        after = recent[-2] if len(recent) >= 2 else -1
        block_params = self._block_params(stage, layers)
        if self.offload is not None and fetch:  # ZeRO-Infinity: the shard comes from the host first
            after = self.offload.fetch_params(c, step, a, block_params / self.shard, after, layers[0])
            if not self.active:
                return after
        size = self.elem * block_params  # nccl-tests size: the whole gathered buffer
        return self._collective(c, step, "all_gather", f"L{layers[0]}.param_ag", size, [after],
                                a, layer=layers[0])

    def after_block(self, c: Coords, step: int, stage: StageInfo, a: Action,
                    layers: tuple[int, ...], block_id: int) -> None:
        """Record the block and, if its gradients are due, reduce them (all-reduce or reduce-scatter)."""
        self.recent_blocks.setdefault(self.b.rank(c), []).append(block_id)
        if not (self._reduces_after(a) or (self.active and self.zero == 3 and a.phase == self.grad_phase)):
            if self.offload is not None and not self.active and a.phase == self.grad_phase and a.microbatch == self.last_mb:
                copy = self.offload.grads_to_host(c, step, a, self._block_params(stage, layers), block_id)
                self.reductions.setdefault((self.b.rank(c), step), []).append(copy)
            return
        kind = "all_reduce" if self.zero == 0 else "reduce_scatter"
        size = self.elem * self._block_params(stage, layers)
        name = f"grad_{'ar' if kind == 'all_reduce' else 'rs'} L{layers[0]}-{layers[-1]}" if layers else "grad"
        task = self._collective(c, step, kind, name, size, [block_id], a, layer=layers[0] if len(layers) == 1 else -1)
        if not self.b.plan.overlap_grad_reduce:
            self.b.graph.tasks[task].ordered = True
        self.reductions.setdefault((self.b.rank(c), step), []).append(task)
        if self.offload is not None:  # ZeRO-Offload: the reduced shard goes to the host right away
            copy = self.offload.grads_to_host(c, step, a, self._block_params(stage, layers) / self.shard, task)
            self.reductions[(self.b.rank(c), step)].append(copy)

    def after_action(self, c: Coords, step: int, a: Action, last_id: int) -> None:
        """Nothing after a whole action (reductions are per block)."""

    # ---- step boundaries ----
    def step_start_gathers(self, c: Coords, step: int, prev_end: int) -> dict[int, list[int]]:
        """ZeRO-1/2 with overlapped parameter gathering: per chunk, the all-gathers its first forward waits for."""
        if not (self.active and self.zero in (1, 2) and self.b.plan.overlap_param_gather):
            return {}
        return {chunk: self._param_gathers(c, step, chunk, prev_end) for chunk in range(self.b.schedule.vpp)}

    def step_end(self, c: Coords, step: int, extra_deps: list[int] | None = None) -> int:
        """The optimizer step after all gradient reductions and ``extra_deps`` (+ parameter
        gathers if not overlapped)."""
        rank = self.b.rank(c)
        params = sum(self.b.stages[self.b.schedule.stage_of(c.pp, ch)].params_local
                     for ch in range(self.b.schedule.vpp))
        params /= self.shard if self.zero >= 1 else 1
        deps = self.reductions.pop((rank, step), []) + list(extra_deps or [])
        self.recent_blocks.pop(rank, None)
        if self.offload is not None:
            opt = self.offload.optimizer_step(c, step, params, deps)
        else:
            opt = self.b.graph.add(Task(rank=rank, lane="compute", kind="optimizer", name="optimizer",
                                        ops=self.b.work.optimizer_ops(params), step=step), deps)
        if self.active and self.zero in (1, 2) and not self.b.plan.overlap_param_gather:
            gathers = [g for ch in range(self.b.schedule.vpp) for g in self._param_gathers(c, step, ch, opt)]
            return gathers[-1] if gathers else opt
        return opt

    def _param_gathers(self, c: Coords, step: int, chunk: int, after: int) -> list[int]:
        stage = self.b.stages[self.b.schedule.stage_of(c.pp, chunk)]
        total = self.elem * stage.params_local
        buckets = max(1, math.ceil(total / self.b.plan.dp_bucket_bytes))
        a = Action(stage=stage.index, phase="F", microbatch=-1, chunk=chunk)
        return [self._collective(c, step, "all_gather", f"param_ag c{chunk} b{i}", total / buckets, [after], a)
                for i in range(buckets)]

    # ---- one collective ----
    def _collective(self, c: Coords, step: int, kind: str, name: str, size: float,
                    deps: list[int], a: Action, layer: int = -1, before: tuple[Op, ...] = ()) -> int:
        """The DP collective task (``before``: ops the call runs first, inside it)."""
        op = Op("comm.dp", kind, name, kind, bytes=size, dim="dp", layer=layer)
        group = "" if self.b.options.folded else (
            f"dp/{step}/{a.stage}/{a.phase}{a.microbatch}/{name}/tp{c.tp}pp{c.pp}")
        task = Task(rank=self.b.rank(c), lane="comm.dp", kind=kind, name=name, ops=(*before, op), step=step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=layer, group=group)
        return self.b.graph.add(task, deps)
