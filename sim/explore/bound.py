"""A cheap lower bound on a plan's step time: a pipeline rank's compute blocks back to back,
after the forward chain that must reach it and before the backward chain that must leave it.

Every compute block a rank runs is one task on its compute stream, and the stream runs its
tasks one at a time (:mod:`sim.list_engine`: an ordered stream starts a task once the previous
one has ended). A block's duration is its ops laid back to back (:func:`sim.costing.layout_ops`),
and interference only lengthens compute tasks (slowdowns >= 1). Each micro-batch runs every
phase (F, B, and W when the schedule splits backward) of every stage a rank holds once, and a
pass is cut into blocks by the data-parallel rule (:func:`schedules.passes.dp.blocks`), which
only groups its layers: the blocks' ops are, in order, the ops of the whole pass (embedding and
head at its two ends). Laying ops back to back never takes longer for a whole list than for its
pieces one after the other, so a rank's blocks take at least

    work(r) = m * sum over r's stages s and phases p of  layout(pass(s, p))      (m micro-batches)

A rank's first block is a forward of one of its stages s (a backward needs its forward first),
which waits for the forwards of that micro-batch on stages 0 .. s-1, one after the other (each
sends its activations to the next): ``head(r) = min over r's stages s of sum_{s' < s} F(s')``.
Without a split backward a rank's last block is a backward of one of its stages s (every forward
is followed by its own backward on the same rank), after which that micro-batch's backward runs
on stages s-1 .. 0: ``tail(r) = min over r's stages s of sum_{s' < s} B(s')`` (0 with a split
backward, whose W blocks may come last). The step, from the first task's start to the last
task's end, lasts at least

    max over pipeline ranks r of  head(r) + work(r) + tail(r)

which is the classic bubble of 1F1B ((pp - 1)(F + B) + m(F + B), stages alike) and of the
interleaved schedule. Nothing is assumed about communication, the optimizer or interference;
``tests/sim/test_explore_bound.py`` checks the bound against the evaluator on whole sweeps.
Where MoE all-to-alls overlap other micro-batches' compute (:mod:`schedules.passes.ep_overlap`
takes the EP-lane ops out of paired blocks), a pass counts only its ops off the EP lane that
start after the previous one (a block lasts at least the sum of those, whatever it lost).
Plans the evaluator builds their own graph for because their work differs (the included
trainer's runtime, activation offload) get the trivial bound 0.
"""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, Phase, Runtime
from schedules.actions import PipelineSchedule
from schedules.model import ModelSpec
from schedules.passes.ep_overlap import overlaps_all_to_alls
from schedules.passes.program import pass_layers
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo
from sim.explore.pricing import PlanPrices, rank_function

PassCache = dict[tuple[int, int, int, bool], tuple[tuple[Op, ...], float]]
"""(id of the coster, id of a pass's ops, rank, EP ops left out) -> (the ops, kept alive, and their seconds)."""


def step_lower_bound_s(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
                       prices: PlanPrices, passes: PassCache | None = None, split: bool | None = None) -> float:
    """Seconds the plan's step takes at least (0.0 when no bound is derived for it); ``passes``:
    pass durations shared between plans (their work's ops are the same tuples when their
    :class:`schedules.work.ModelWork` is shared); ``split``: the schedule's ``split_backward``
    when the caller knows it (the property walks every action)."""
    if plan.framework != Runtime.MEGATRON or plan.offload_activations:
        return 0.0
    strip_ep = overlaps_all_to_alls(model, plan)
    cache: PassCache = {} if passes is None else passes
    rank_of = rank_function(plan)
    split = schedule.split_backward if split is None else split
    phases = (Phase.F, Phase.B, Phase.W) if split else (Phase.F, Phase.B)
    ranks = [rank_of(0, 0, 0, r) for r in range(plan.pp)]
    held = {r: [schedule.stage_of(r, chunk) for chunk in range(schedule.vpp)] for r in range(plan.pp)}
    owner = {s: r for r, stages in held.items() for s in stages}
    pass_s: dict[tuple[int, str], float] = {}
    for s, r in owner.items():
        for phase in phases:
            pass_s[s, phase] = _pass_s(prices, prices.stages[s], phase, ranks[r], cache, strip_ep)
    chain = {phase: [0.0] for phase in (Phase.F, Phase.B)}  # chain[p][s]: sum of pass p over stages < s
    for s in range(len(owner)):
        for phase, sums in chain.items():
            sums.append(sums[-1] + pass_s[s, phase])
    best = 0.0
    for stages in held.values():
        work_s = plan.num_microbatches * sum(pass_s[s, p] for s in stages for p in phases)
        head = min(chain[Phase.F][s] for s in stages)
        tail = 0.0 if split else min(chain[Phase.B][s] for s in stages)
        best = max(best, head + work_s + tail)
    return best


def _pass_s(prices: PlanPrices, stage: StageInfo, phase: str, rank: int, cache: PassCache,
            strip_ep: bool = False) -> float:
    """Seconds of one whole pass of ``stage``'s layers laid back to back on ``rank`` (``strip_ep``:
    at least the sum of its non-concurrent ops off the EP lane).

    A dense model's layers are alike (one shape: their ops differ only in names), so when no
    piece starts beside the previous one's last op (a ``concurrent`` first op) the layout of
    head + layers + tail is the sum of the pieces' layouts, each priced once; otherwise the
    whole pass is laid out."""
    work = prices.work
    layers = pass_layers(stage, phase)
    if strip_ep:
        return _layout_s(prices, work.block_ops(stage, phase, layers, True, True), rank, cache, strip_ep=True)
    if work.kind.alike and layers:
        head = work.block_ops(stage, phase, (), True, False)
        one = work.block_ops(stage, phase, layers[:1], False, False)
        tail = work.block_ops(stage, phase, (), False, True)
        if not any(piece and piece[0].concurrent for piece in (one, tail)):
            return (_layout_s(prices, head, rank, cache) + len(layers) * _layout_s(prices, one, rank, cache)
                    + _layout_s(prices, tail, rank, cache))
    return _layout_s(prices, work.block_ops(stage, phase, layers, True, True), rank, cache)


def _layout_s(prices: PlanPrices, ops: tuple[Op, ...], rank: int, cache: PassCache, strip_ep: bool = False) -> float:
    """Seconds of ``ops`` laid back to back in a compute task on ``rank`` (``strip_ep``: the sum
    of the non-concurrent ones off the EP lane; memoized by the ops' identity)."""
    if not ops:
        return 0.0
    coster = prices.context.coster
    key = (id(coster), id(ops), rank, strip_ep)
    found = cache.get(key)
    if found is None:
        if strip_ep:
            seconds = sum(coster.op_duration(op, rank) for op in ops if op.lane != Lane.EP and not op.concurrent)
        else:
            seconds = coster.layout(Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.OTHER, name="bound",
                                         ops=ops)).duration_s
        found = cache[key] = (ops, seconds)
    return found[1]
