"""A plan's folded training step as a compact task list: the builder's graph, without Task objects.

:func:`schedules.builder.build_task_graph` (with :mod:`schedules.dp_tasks`) makes the graph the
engine runs; building its Task objects costs more than timing them, so a sweep emits the same
tasks here as flat lists with their prices attached. The rules are the builder's, for a folded
graph (one rank per pipeline rank) of one step:

- each pipeline rank runs its schedule's actions in order on its compute stream; an action is one
  block of layers, or several when data-parallel gradients are reduced bucket by bucket as they
  are produced (ZeRO 0/1 on the last micro-batch, ZeRO-2 on every one) or, under ZeRO-3, one
  block per layer, each after the all-gather of its parameters (prefetched: it waits for the
  block two before it);
- a forward waits for the previous stage's activations and a backward for the next stage's
  gradients, delivered by an (unordered) send when the stages sit on different ranks; a
  backward also waits for its own forward;
- DP collectives run in program order on the rank's DP stream; the optimizer step waits for all of
  the rank's gradient reductions; ZeRO-1/2 all-gather the updated parameters at the start of the
  step (before each chunk's first forward), or after the optimizer when not overlapped.

``tests/sim/test_explore_fast.py`` checks that this graph times exactly as the builder's graph
does, and as the engine runs it, over every ZeRO stage and schedule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from schedules.actions import Action, PipelineSchedule
from schedules.build.dp import GRAD_BYTES, PARAM_BYTES
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo
from sim.explore.pricing import PlanPrices, Price, rank_function

MIRRORED_FIELDS = frozenset((
    "tp", "cp", "pp", "dp", "vpp", "microbatch_size", "global_batch", "zero", "sequence_parallel",
    "recompute", "dtype", "schedule", "flash_attention", "dp_bucket_bytes", "overlap_grad_reduce",
    "overlap_param_gather", "uneven_stages", "placement"))
MIRRORED_DTYPES = ("bf16", "fp8")  # 2-byte gradients and parameters on the wire
COMPUTE, SEND, DP = 0, 1, 2
LANE_NAMES = ("compute", "comm.pp", "comm.dp")
Recipe = list[tuple[int, int, int]]  # per block: (compute price id, its gather's or -1, its reduction's or -1)


@dataclass
class StepGraph:
    """Tasks of one folded step.

    Attributes:
        pp: pipeline ranks; ``ranks[r]``: the global rank simulated for pipeline rank r.
        prices: the distinct priced tasks: (lane, Price, receiving pipeline rank of a send or -1).
        price_of: per task, its index in ``prices``.
        deps: per task, the tasks it waits for besides its stream predecessor (compute and DP
            tasks run in program order on their rank's stream; sends are unordered).
        order: per pipeline rank, its task ids in program order (same-rank dependencies always
            come first; dependencies on other ranks may not).
    """

    pp: int
    ranks: list[int]
    prices: list[tuple[int, Price, int]] = field(default_factory=list)
    price_of: list[int] = field(default_factory=list)
    deps: list[tuple[int, ...]] = field(default_factory=list)
    order: list[list[int]] = field(default_factory=list)


class StepEmitter:
    """Emits the StepGraph of one plan (one instance per plan)."""

    def __init__(self, plan: ParallelPlan, schedule: PipelineSchedule, prices: PlanPrices) -> None:
        self.plan, self.schedule, self.prices = plan, schedule, prices
        self.stages: list[StageInfo] = prices.stages
        self.shard = plan.dp * plan.cp
        self.active = self.shard > 1
        self.zero = plan.zero if self.active else 0
        self.grad_phase = "W" if schedule.split_backward else "B"
        self.last_mb = plan.num_microbatches - 1
        rank_of = rank_function(plan)
        self.g = StepGraph(pp=plan.pp, ranks=[rank_of(0, 0, 0, r) for r in range(plan.pp)],
                           order=[[] for _ in range(plan.pp)])
        self.keys: dict[int, int] = {}
        self.pending: list[tuple[int, int]] = []
        self.stage_rank = [schedule.rank_of(st) for st in range(schedule.num_stages)]
        self.send_ids: dict[tuple[int, int], int] = {}
        self.price_ids: dict[tuple[object, ...], int] = {}
        self.recipes: dict[tuple[int, int, str, bool], Recipe] = {}

    def emit(self) -> StepGraph:
        """Every rank's step, then the cross-rank dependencies."""
        for r in range(self.plan.pp):
            self._rank_step(r)
        deps = self.g.deps
        for task, key in self.pending:
            deps[task] = (*deps[task], self.keys[key])
        return self.g

    # ---- one rank ----
    def _rank_step(self, r: int) -> None:
        gathers = self._start_gathers(r)
        reductions: list[int] = []
        recent: list[int] = []
        first_done: set[int] = set()
        g = self.g
        price_of, all_deps, order = g.price_of, g.deps, g.order[r]
        for a in self.schedule.orders[r]:
            deps = tuple(gathers.get(a.chunk, ())) if a.chunk not in first_done else ()
            first_done.add(a.chunk)
            first_id = -1
            for block, gather, reduce in self._recipe(r, a):
                if gather >= 0:  # ZeRO-3: this layer's parameters, prefetched after the block two back
                    i = len(price_of)
                    price_of.append(gather)
                    all_deps.append((recent[-2],) if len(recent) >= 2 else ())
                    order.append(i)
                    deps = (*deps, i)
                i = len(price_of)
                price_of.append(block)
                all_deps.append(deps)
                order.append(i)
                recent.append(i)
                if first_id < 0:
                    first_id, deps = i, ()
                if reduce >= 0:
                    reductions.append(i + 1)
                    price_of.append(reduce)
                    all_deps.append((i,))
                    order.append(i + 1)
            self._link(r, a, first_id, recent[-1])
        self._step_end(r, reductions)

    def _recipe(self, r: int, a: Action) -> Recipe:
        """The priced blocks of an action (the same for every micro-batch but the last)."""
        reduces = self._reduces_after(a)  # ZeRO-3 reduces after every gradient pass too (zero >= 2)
        key = (r, a.stage, a.phase, reduces)
        if key not in self.recipes:
            stage, rank = self.stages[a.stage], self.g.ranks[r]
            blocks = self._blocks(stage, a)
            recipe = []
            for i, layers in enumerate(blocks):
                block = self._price_id(COMPUTE, ("block", rank, a.stage, a.phase, layers, i == 0, i == len(blocks) - 1))
                gather = reduce = -1
                if self.zero == 3 and a.phase in ("F", "B"):
                    gather = self._dp_id(rank, "all_gather", PARAM_BYTES * self._block_params(stage, layers))
                if reduces:
                    kind = "all_reduce" if self.zero == 0 else "reduce_scatter"
                    reduce = self._dp_id(rank, kind, GRAD_BYTES * self._block_params(stage, layers))
                recipe.append((block, gather, reduce))
            self.recipes[key] = recipe
        return self.recipes[key]
    def _blocks(self, stage: StageInfo, a: Action) -> list[tuple[int, ...]]:
        layers = stage.layers if a.phase == "F" else tuple(reversed(stage.layers))
        if not layers:
            return [()]
        if self.zero == 3:
            return [(layer,) for layer in layers]
        if self._reduces_after(a):
            per_bucket = max(1, int(self.plan.dp_bucket_bytes // (GRAD_BYTES * stage.layer_params_local)))
            return [layers[i:i + per_bucket] for i in range(0, len(layers), per_bucket)]
        return [layers]

    def _reduces_after(self, a: Action) -> bool:
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

    # ---- step boundaries ----
    def _start_gathers(self, r: int) -> dict[int, list[int]]:
        if not (self.zero in (1, 2) and self.plan.overlap_param_gather):
            return {}
        return {chunk: self._param_gathers(r, chunk, ()) for chunk in range(self.schedule.vpp)}

    def _param_gathers(self, r: int, chunk: int, deps: tuple[int, ...]) -> list[int]:
        total = PARAM_BYTES * self.stages[self.schedule.stage_of(r, chunk)].params_local
        buckets = max(1, math.ceil(total / self.plan.dp_bucket_bytes))
        price = self._dp_id(self.g.ranks[r], "all_gather", total / buckets)
        return [self._add(r, price, deps) for _ in range(buckets)]

    def _step_end(self, r: int, reductions: list[int]) -> None:
        params = sum(self.stages[self.schedule.stage_of(r, ch)].params_local for ch in range(self.schedule.vpp))
        params /= self.shard if self.zero >= 1 else 1
        opt = self._add(r, self._price_id(COMPUTE, ("optimizer", self.g.ranks[r], params)), reductions)
        if self.zero in (1, 2) and not self.plan.overlap_param_gather:
            for chunk in range(self.schedule.vpp):
                self._param_gathers(r, chunk, (opt,))

    # ---- pipeline links ----
    def _link(self, r: int, a: Action, first_id: int, last_id: int) -> None:
        """Wire an action to its producer and, through a send if needed, to its consumer. Keys are
        ints: kind * (stages * m) + stage * m + micro-batch, kind 0 = F delivered, 1 = F done,
        2 = B delivered."""
        n, m = self.schedule.num_stages, self.plan.num_microbatches
        per_kind, here = n * m, a.stage * m + a.microbatch
        if a.phase == "F":
            if a.stage > 0:
                self.pending.append((first_id, here - m))
            if a.stage < n - 1:
                self.keys[here] = self._send(r, last_id, a.stage + 1)
            self.keys[per_kind + here] = last_id
        elif a.phase == "B":
            self.pending.append((first_id, per_kind + here))
            if a.stage < n - 1:
                self.pending.append((first_id, 2 * per_kind + here + m))
            if a.stage > 0:
                self.keys[2 * per_kind + here] = self._send(r, last_id, a.stage - 1)

    def _send(self, r: int, after: int, to_stage: int) -> int:
        dest = self.stage_rank[to_stage]
        if dest == r:
            return after
        price = self.send_ids.get((r, dest))
        if price is None:
            price = self.send_ids[(r, dest)] = self._price_id(
                SEND, ("send", self.g.ranks[r], self.g.ranks[dest]), peer_pp=dest)
        return self._add(r, price, (after,))

    # ---- prices and tasks ----
    def _dp_id(self, rank: int, kind: str, size: float) -> int:
        return self._price_id(DP, ("dp", rank, kind, size))

    def _price_id(self, lane: int, key: tuple[object, ...], peer_pp: int = -1) -> int:
        """Index of the priced task ``key`` in the graph's price table (priced on first use)."""
        pid = self.price_ids.get(key)
        if pid is None:
            kind, rank, *args = key
            price = getattr(self.prices, "collective" if kind == "dp" else str(kind))(rank, *args)
            pid = self.price_ids[key] = len(self.g.prices)
            self.g.prices.append((lane, price, peer_pp))
        return pid

    def _add(self, r: int, price_id: int, deps: tuple[int, ...] | list[int]) -> int:
        g = self.g
        i = len(g.price_of)
        g.price_of.append(price_id)
        g.deps.append(tuple(deps))
        g.order[r].append(i)
        return i
def mirrors_builder(plan: ParallelPlan) -> bool:
    """Whether this module reproduces the builder's graph for ``plan``: its dtype is one the rules
    here were written for and every plan field they do not read is at its default (a field added
    to :class:`ParallelPlan` later is taken to change nothing at its default)."""
    return plan.dtype in MIRRORED_DTYPES and all(
        getattr(plan, f.name) == f.default for f in dataclasses.fields(plan) if f.name not in MIRRORED_FIELDS)


def emit_step(plan: ParallelPlan, schedule: PipelineSchedule, prices: PlanPrices) -> StepGraph:
    """The folded one-step task list of ``plan`` run with ``schedule``, priced by ``prices``."""
    return StepEmitter(plan, schedule, prices).emit()
