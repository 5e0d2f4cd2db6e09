"""Run a sweep: enumerate and prune every (design, GPU count), evaluate what is left on a
backend, write rows as they come, and the final tables at the end. ``resume=True`` reads the
directory's spec and rows and evaluates only the plans that have no row yet.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from schedules.model import ModelSpec
from schedules.model_presets import get_model
from sim.explore.backends import Backend, InProcess
from sim.explore.bound_prune import bound_prune
from sim.explore.designs import base_cluster, sized_cluster
from sim.explore.enumerate import Candidate, Enumerator
from sim.explore.evaluate import make_units
from sim.explore.pruning import BOUND_REASON, REASONS
from sim.explore.spec import SweepSpec
from sim.explore.store import ResultStore
from sim.job import Job
from topo import ClusterSpec

Progress = Callable[[int, int], None]
"""Called with (plans done, plans in the sweep) as units finish."""


@dataclass
class SweepPlan:
    """What a sweep evaluates: the model, the surviving candidates, and what was pruned."""

    model: ModelSpec
    members: list[tuple[Candidate, ClusterSpec]] = field(default_factory=list)
    pruned: dict[str, dict[str, int]] = field(default_factory=dict)  # "design/gpus" -> reason -> plans
    empty: dict[str, str] = field(default_factory=dict)  # "design/gpus" with no plan left -> why, in words

    @property
    def runnable(self) -> int:
        """Plans that could run at all (kept, or pruned for memory only)."""
        return len(self.members) + self.pruned_total[REASONS[5]]

    @property
    def pruned_total(self) -> Counter[str]:
        """Pruned plans by reason over all designs and GPU counts."""
        total: Counter[str] = Counter()
        for counts in self.pruned.values():
            total.update(counts)
        return total


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: every row (sorted by id), what was pruned, and what this run did."""

    spec: SweepSpec
    plan: SweepPlan
    rows: list[dict[str, Any]]
    evaluated: int  # plans evaluated by this run
    resumed: int  # plans whose rows an earlier run had written
    cpu_s: float  # this process's CPU time evaluating (workers' time not included)
    wall_s: float


def sweep_model(spec: SweepSpec) -> ModelSpec:
    """The spec's model (with its sequence-length override)."""
    model = get_model(spec.model)
    return replace(model, seq_len=spec.seq_len) if spec.seq_len else model


def plan_sweep(spec: SweepSpec) -> SweepPlan:
    """Enumerate and prune every (design, GPU count) of ``spec``."""
    plan = SweepPlan(model=sweep_model(spec))
    enumerator = Enumerator(plan.model, spec.global_batch, spec.space)
    for design, gpus in spec.points():
        label = base_cluster(design).name
        cluster = sized_cluster(design, gpus, spec.price_of(design))
        kept, log = enumerator.run_logged(label, cluster)
        key = f"{label}/{gpus}"
        plan.members += [(c, cluster) for c in kept]
        plan.pruned[key] = {**dict(sorted(log.counts.items())), "evaluated": len(kept)}
        if not kept:
            plan.empty[key] = log.explain(enumerator.context(cluster))
    return plan


def nothing_runs(plan: SweepPlan) -> str:
    """Why no plan of the sweep could even run (one line), or "" when some could."""
    if plan.runnable:
        return ""
    return "no plan can run: " + " | ".join(f"{k}: {why}" for k, why in plan.empty.items())


def run_sweep(spec: SweepSpec | None, out: str | Path, backend: Backend, *, resume: bool = False,
              progress: Progress | None = None, keep: int | None = None) -> SweepOutcome:
    """Run (or with ``resume``, continue) the sweep in directory ``out``.

    ``keep``: time only what can matter to the ``keep`` fastest plans of each (design, GPU
    count): plans whose step-time lower bound (:mod:`sim.explore.bound`) is above the
    ``keep``-th fastest step timed so far are not timed (:func:`bound_prune`; the best plans,
    the Pareto front and the fastest and cheapest plan per design are the same as without it).
    None: time every plan.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    store = ResultStore(out)
    if resume:
        spec = store.read_spec()
    elif spec is None:
        raise ValueError("spec=None is invalid: give a sweep spec, or resume an existing sweep")
    elif store.has_spec():
        raise ValueError(f"out={str(out)!r} is invalid: it already holds a sweep; use --resume {out} or another --out")
    plan = plan_sweep(spec)
    if nothing_runs(plan):  # the user's constraints admit no plan: nothing is written
        raise ValueError(nothing_runs(plan))
    if not resume:
        store.write_spec(spec)
    wanted = {c.plan_id for c, _ in plan.members}
    done = {k: v for k, v in store.read_rows().items() if k in wanted}
    todo = [(c, cl) for c, cl in plan.members if c.plan_id not in done]
    rows = list(done.values())
    total = len(wanted)
    if progress:
        progress(len(rows), total)

    def evaluate(wave: list[tuple[Candidate, ClusterSpec]]) -> list[dict[str, Any]]:
        new_rows: list[dict[str, Any]] = []
        for new in backend.run(make_units(plan.model, spec.tokens, wave)):
            store.append_rows(new)
            new_rows += new
            rows.extend(new)
            if progress:
                progress(len(rows), total)
        return new_rows

    try:
        if keep is not None:
            bounder = backend.evaluator if isinstance(backend, InProcess) else None
            pruned = bound_prune(plan.model, plan.members, list(done.values()), keep, evaluate, backend.width, bounder)
        else:
            evaluate(todo)
    finally:
        backend.close()
    evaluated = len(rows) - len(done)
    if keep is not None:
        rows = [r for r in rows if r["id"] in pruned.kept]  # the same rows on every backend
        timed = Counter(f"{r['design']}/{r['gpus']}" for r in rows)
        for key, counts in plan.pruned.items():
            plan.pruned[key] = {**{k: v for k, v in counts.items() if k != "evaluated"},
                                BOUND_REASON: pruned.skipped[key], "evaluated": timed[key]}
    rows.sort(key=lambda r: r["id"])
    store.write_tables(spec, plan.pruned, rows)
    return SweepOutcome(spec=spec, plan=plan, rows=rows, evaluated=evaluated, resumed=len(done),
                        cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - t0)


def job_of(spec: SweepSpec, row: dict[str, Any]) -> Job:
    """The simulator Job of a result row (to run the engine on it: timeline, verification)."""
    design = next(d for d in spec.clusters if base_cluster(d).name == row["design"])
    cluster = sized_cluster(design, row["gpus"], spec.price_of(design))
    plan = spec.space.plan(spec.global_batch, tp=row["tp"], cp=row["cp"], pp=row["pp"], dp=row["dp"], vpp=row["vpp"],
                           schedule=row["schedule"], microbatch_size=row["microbatch_size"], zero=row["zero"],
                           sequence_parallel=row["sequence_parallel"], recompute=row["recompute"],
                           ep=row.get("ep", 1))
    return Job(model=sweep_model(spec), plan=plan, cluster=cluster)
