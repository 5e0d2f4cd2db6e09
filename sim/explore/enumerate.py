"""Enumerate the plans of one (cluster design, GPU count) and prune before simulating.

Every point of the grid (tp x cp x pp x schedule/vpp x micro-batch size x ZeRO x SP x recompute)
is either kept or counted under the first rule it breaks, in this order:

1. ``gpus % (tp*cp*pp)``: the GPU count is not a multiple of tp*cp*pp (no whole dp).
2. ``global batch % (dp*mbs)``: the global batch does not split into whole micro-batches.
3. ``layers % (pp*vpp)``: stages would be uneven (allowed with ``uneven_stages``) or too many.
4. ``plan rules``: :func:`schedules.plan.check_plan` refuses it (heads, KV heads, sequence).
5. ``schedule``: the pipeline schedule cannot run this (pp, micro-batches, vpp).
6. ``memory``: the static peak (:mod:`sim.explore.memory_estimate`) exceeds usable HBM.

An MoE model adds expert parallelism: ep takes every power of two that divides the experts and
dp (``SearchSpace.ep`` narrows it), and the default schedules gain DualPipeV, whose pairs hide
the all-to-alls (:mod:`schedules.passes.ep_overlap`).

Grid points that describe the same run are generated once: pp = 1 runs only 1f1b; tp = 1 only
without sequence parallelism; ZeRO stages differ only with data parallelism, so dp*cp = 1 runs
the first requested ZeRO stage only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from schedules.actions import PipelineSchedule
from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan, check_plan
from schedules.plan.layout import INTERLEAVED_SCHEDULES, V_SCHEDULES
from sim.explore.memory_estimate import MemoryEstimate, estimate_memory
from sim.explore.pruning import REASONS, PruneContext, PruneLog
from sim.explore.spec import DEFAULT_SCHEDULES, SearchSpace
from sim.memory import GIB
from sim.size_guard import estimate_explore_plan, explore_plan_budget_bytes
from sim.summary import HBM_RESERVE_FRACTION
from topo import ClusterSpec

Verdict = tuple[ParallelPlan | None, MemoryEstimate | None, str | None, object]
"""A grid point: (plan if one could be built, its memory estimate if its schedule runs, the
pruning reason or None when kept, what the rule found: a product, a message or a peak in GiB)."""


@dataclass(frozen=True)
class Candidate:
    """A plan that passed every pruning rule, with its memory estimate."""

    design: str
    gpus: int
    plan: ParallelPlan
    memory: MemoryEstimate

    @property
    def plan_id(self) -> str:
        """Stable, readable key of this (design, GPU count, plan)."""
        return plan_id(self.design, self.gpus, self.plan)


def plan_id(design: str, gpus: int, p: ParallelPlan) -> str:
    """``design/gpus/tp8.cp1.pp4.dp32.1f1b.v1.mbs1.z1.sp1.rc-none`` (dtype added when not bf16,
    ``.ep8`` after the dp degree under expert parallelism)."""
    dtype = "" if p.dtype == "bf16" else f".{p.dtype}"
    ep = "" if p.ep == 1 else f".ep{p.ep}"
    return (f"{design}/{gpus}/tp{p.tp}.cp{p.cp}.pp{p.pp}.dp{p.dp}{ep}.{p.schedule}.v{p.vpp}.mbs{p.microbatch_size}"
            f".z{p.zero}.sp{int(p.sequence_parallel)}.rc-{p.recompute}{dtype}")


def default_tp(model: ModelSpec, gpus_per_node: int) -> tuple[int, ...]:
    """Divisors of the heads that fit in a node and divide (or are multiples of) the KV heads."""
    return tuple(t for t in range(1, min(model.num_heads, gpus_per_node) + 1)
                 if model.num_heads % t == 0 and (model.kv_heads % t == 0 or t % model.kv_heads == 0))


def default_pp(model: ModelSpec, uneven: bool) -> tuple[int, ...]:
    """Divisors of the layers, or with uneven stages every pp up to half the layers (and the layers)."""
    n = model.num_layers
    if uneven:
        return tuple(sorted({*range(1, n // 2 + 1), n}))
    return tuple(p for p in range(1, n + 1) if n % p == 0)


def _schedules(space: SearchSpace, pp: int) -> list[tuple[str, int]]:
    """(schedule, vpp) pairs to try at this pp."""
    if pp == 1:
        return [("1f1b", 1)]
    out = []
    for name in space.schedules:
        if name in INTERLEAVED_SCHEDULES:
            out += [(name, v) for v in space.vpp if v >= 2]
        elif name in V_SCHEDULES:
            out.append((name, 2))
        else:
            out.append((name, 1))
    return out


class Enumerator:
    """Enumerates and prunes one design's plans; caches schedules across designs."""

    def __init__(self, model: ModelSpec, global_batch: int, space: SearchSpace) -> None:
        if space.schedules == DEFAULT_SCHEDULES:  # with those hiding the layers' communication (MoE: DualPipeV)
            space = dataclasses.replace(space, schedules=(*DEFAULT_SCHEDULES, *layer_kind(model).overlap_schedules))
        self.model, self.global_batch, self.space = model, global_batch, space
        self._schedules: dict[tuple[str, int, int, int], tuple[PipelineSchedule | None, str | None]] = {}

    def run(self, design: str, cluster: ClusterSpec) -> tuple[list[Candidate], Counter[str]]:
        """Plans of ``design`` sized as ``cluster`` that fit, and pruned counts by reason."""
        kept, log = self.run_logged(design, cluster)
        return kept, log.counts

    def run_logged(self, design: str, cluster: ClusterSpec) -> tuple[list[Candidate], PruneLog]:
        """Like :meth:`run`, with what each pruned plan broke (to explain an empty result)."""
        kept: list[Candidate] = []
        log = PruneLog()
        for plan, memory, reason, detail in self.verdicts(cluster):
            if reason is None:
                assert plan is not None and memory is not None
                kept.append(Candidate(design, cluster.num_gpus, plan, memory))
            else:
                log.add(reason, detail)
        return kept, log

    def context(self, cluster: ClusterSpec) -> PruneContext:
        """What :meth:`PruneLog.explain` quotes for ``cluster``."""
        hbm = cluster.device.hbm_bytes / GIB
        return PruneContext(gpus=cluster.num_gpus, global_batch=self.global_batch, layers=self.model.num_layers,
                            hbm_gib=hbm, usable_gib=hbm * (1 - HBM_RESERVE_FRACTION))

    def classify(self, cluster: ClusterSpec) -> Iterator[tuple[ParallelPlan | None, MemoryEstimate | None, str | None]]:
        """Every grid point on ``cluster``: (plan if one could be built, its memory estimate if
        its schedule runs, the pruning reason or None when kept)."""
        return ((plan, memory, reason) for plan, memory, reason, _ in self.verdicts(cluster))

    def verdicts(self, cluster: ClusterSpec) -> Iterator[Verdict]:
        """Every grid point on ``cluster`` as a :data:`Verdict` (a device without the sweep's
        dtype, e.g. FP8 on an A100 beside an H100 design, prunes all of its plans by plan rule)."""
        device = cluster.device
        no_math = "" if self.space.dtype in device.dtypes() else \
            f"device {device.name!r} has no {self.space.dtype} math (it supports {', '.join(device.dtypes())})"
        for plan, reason, detail in self._grid(cluster.num_gpus, cluster.gpus_per_node):
            if plan is None:
                yield None, None, reason, detail
                continue
            if no_math:
                yield plan, None, REASONS[3], no_math
                continue
            schedule, error = self._schedule(plan)
            if schedule is None:
                yield plan, None, REASONS[4], error
                continue
            memory = estimate_memory(self.model, plan, schedule)
            fits = memory.fits(cluster.device.hbm_bytes)
            yield plan, memory, None if fits else REASONS[5], memory.peak.total / GIB

    def _grid(self, gpus: int, gpus_per_node: int) -> Iterator[tuple[ParallelPlan | None, str | None, object]]:
        s, m = self.space, self.model
        tps = s.tp or default_tp(m, gpus_per_node)
        pps = s.pp or default_pp(m, s.uneven_stages)
        for tp, cp, pp in itertools.product(tps, s.cp, pps):
            for (schedule, vpp), mbs in itertools.product(_schedules(s, pp), s.microbatch_sizes):
                if gpus % (tp * cp * pp):
                    yield from ((None, REASONS[0], tp * cp * pp) for _ in self._variants(tp, shard=2))
                    continue
                dp = gpus // (tp * cp * pp)
                for (zero, sp, rc), ep in itertools.product(self._variants(tp, shard=dp * cp), self._eps(dp)):
                    yield self._plan(tp=tp, cp=cp, pp=pp, dp=dp, vpp=vpp, schedule=schedule,
                                     microbatch_size=mbs, zero=zero, sequence_parallel=sp, recompute=rc, ep=ep)

    def _eps(self, dp: int) -> tuple[int, ...]:
        """Expert-parallel degrees to try: the space's, or (MoE models) every power of two that
        divides both the experts and dp; (1,) for a dense model (its layer kind's answer)."""
        return layer_kind(self.model).expert_parallel_degrees(self.model, dp, self.space.ep)

    def _variants(self, tp: int, shard: int) -> list[tuple[int, bool, str]]:
        """(ZeRO, SP, recompute) combinations that differ for this tp and DP x CP group size."""
        s = self.space
        zeros = s.zero if shard > 1 else s.zero[:1]  # all stages alike without DP
        sps = s.sequence_parallel if tp > 1 else (False,)
        return list(itertools.product(zeros, dict.fromkeys(sps), s.recompute))

    def _plan(self, **fields: object) -> tuple[ParallelPlan | None, str | None, object]:
        dp, mbs, pp, vpp = (int(fields[k]) for k in ("dp", "microbatch_size", "pp", "vpp"))  # type: ignore[call-overload]
        if self.global_batch % (dp * mbs):
            return None, REASONS[1], dp * mbs
        layers = self.model.num_layers
        if layers < pp * vpp or (layers % (pp * vpp) and not self.space.uneven_stages):
            return None, REASONS[2], pp * vpp
        try:
            plan = self.space.plan(self.global_batch, **fields)
            check_plan(self.model, plan)
        except ValueError as exc:
            return None, REASONS[3], str(exc)
        return plan, None, None

    def _schedule(self, plan: ParallelPlan) -> tuple[PipelineSchedule | None, str | None]:
        """The plan's schedule, or None and why it cannot be built."""
        key = (plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
        size = estimate_explore_plan(plan)  # the size guard: a plan too large to evaluate is pruned
        if size.bytes > explore_plan_budget_bytes():
            return None, (f"{plan.schedule}: {plan.num_microbatches} micro-batches x pp {plan.pp} is too large to "
                          f"evaluate ({size.describe()}); give a smaller --global-batch")
        if key not in self._schedules:
            try:
                self._schedules[key] = build_schedule(*key), None
            except ValueError as exc:
                self._schedules[key] = None, f"{plan.schedule}: {exc}"
        return self._schedules[key]
