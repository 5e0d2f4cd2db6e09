"""The sweep report: Pareto front across designs, best plans, where time goes, and the engine's
check of the top plans with the best plan's timeline (self-contained HTML, Plotly inlined)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.explore import failure_scaling as scaling
from sim.explore.display import count_short, display_rows, yes_no
from sim.explore.failure_figure import scaling_figure
from sim.explore.figures import breakdown_figure, pareto_figure
from sim.explore.overview import describe_inputs, design_rows, run_inputs, shown_designs
from sim.explore.pruning import BOUND_REASON, REASONS
from sim.explore.rank import Row, best_per_design, describe_plan, pareto_front, shown
from sim.explore.sweep import SweepOutcome, job_of
from sim.report.figures import timeline_figure
from sim.report.html import PlotlyJs, Report
from sim.simulate import SimulationResult, simulate
from sim.summary import straggler_approximations

FAST_EVALUATOR_NOTE = (
    "Plans are timed by trainsim's fast evaluator: the simulator's own task graph rules and cost "
    "model (GEMMs by shape, NCCL's collective model on the cluster's links, interference), timed by "
    "the list engine instead of the SimPy engine. It equals the engine's step time exactly unless "
    "a pipeline send and a DP transfer share a node's network at the same moment (column "
    "'contention'), where the engine splits the bandwidth and its step is slightly longer; the top "
    "plans are re-run on the engine to check.")


@dataclass(frozen=True)
class EngineCheck:
    """A ranked row re-simulated by the SimPy engine."""

    row: Row
    result: SimulationResult

    def as_row(self) -> dict[str, Any]:
        """Fast vs engine step time, and the engine's breakdown."""
        fast, m = self.row["step_time_s"], self.result.metrics
        return {"design": self.row["design"], "gpus": self.row["gpus"], "plan": describe_plan(self.row),
                "fast_step_s": fast, "engine_step_s": m.step_time_s,
                "difference_pct": 100 * (m.step_time_s - fast) / m.step_time_s,
                "contention": self.row["contention"], "engine_bubble": m.bubble_fraction,
                "engine_exposed_comm": m.exposed_comm_fraction}


def shown_checks(checks: Sequence[EngineCheck]) -> list[dict[str, Any]]:
    """The checks' rows as printed (``contention`` as yes/no, the difference as ``+0.102%``)."""
    return display_rows([c.as_row() for c in checks], {"contention": yes_no, "difference_pct": "{:+.3f}%".format})


def check_on_engine(outcome: SweepOutcome, rows: Sequence[Row]) -> list[EngineCheck]:
    """Simulate ``rows`` with the full (folded) SimPy engine."""
    return [EngineCheck(r, simulate(job_of(outcome.spec, r))) for r in rows]


def pruned_rows(pruned: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """One row per (design, GPU count) with every reason any of them has, in the order the rules
    apply (a reason a design did not meet counts 0), then the bound and the evaluated plans."""
    order = [*REASONS, BOUND_REASON, "evaluated"]
    present = {k for counts in pruned.values() for k in counts}
    columns = [k for k in order if k in present] + sorted(present - set(order))
    return [{"design/gpus": key, **{c: counts.get(c, 0) for c in columns}} for key, counts in pruned.items()]


def write_sweep_report(outcome: SweepOutcome, out_dir: str | Path, checks: Sequence[EngineCheck],
                       top: int = 10, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> dict[str, Path]:
    """Write report.html and pareto.html (the Pareto figure alone) into ``out_dir``."""
    spec, rows = outcome.spec, outcome.rows
    front = pareto_front(rows)
    points = ", ".join(f"{d} × {g}" for d, g in spec.points())
    rep = Report(f"trainsim explore — {spec.model} on {points} GPUs")
    _overview(rep, outcome)
    if rows:
        _results(rep, outcome, front, checks, top)
    rep.heading("Pruned before simulating (plans per reason)")
    rep.table(pruned_rows(outcome.plan.pruned))
    rep.heading("What this model does not capture")
    for line in straggler_approximations(0.0, gpus=None):  # explore times no jitter
        rep.note("• " + line)
    pareto = Report(f"trainsim explore — {spec.model} on {points} GPUs")
    if rows:
        pareto.figure(pareto_figure(rows, front, _title(outcome)))
    else:
        _nothing_left(pareto, outcome)
    out = Path(out_dir)
    return {"report": rep.write(out / "report.html", plotly_js),
            "pareto": pareto.write(out / "pareto.html", plotly_js)}


def _title(outcome: SweepOutcome) -> str:
    """The Pareto plot's title; it says how many of the plans that fit were timed (the step-time
    bound skips plans that cannot reach the top, see :mod:`sim.explore.bound_prune`)."""
    spec, timed = outcome.spec, len(outcome.rows)
    fit = timed + outcome.plan.pruned_total[BOUND_REASON]
    shown = f"every plan that fits ({fit:,})" if timed == fit else f"timed plans ({timed:,} of {fit:,} that fit)"
    failures = ", expected with failures, checkpoints and restarts" if scaling.is_failure_aware(outcome.rows) else ""
    return (f"{spec.model}: time and cost to train {count_short(spec.tokens)} tokens "
            f"(global batch {spec.global_batch}{failures}), {shown}")


def _overview(rep: Report, outcome: SweepOutcome) -> None:
    """The training run, then each design's size, price (and its source) and best plans."""
    rep.note(describe_inputs(run_inputs(outcome.spec, outcome.plan.model)))
    rep.heading("Designs, prices and their best plans")
    rep.table(shown_designs(design_rows(outcome.spec, outcome.plan, outcome.rows)))
    if not outcome.rows:
        _nothing_left(rep, outcome)
        return
    for key, why in outcome.plan.empty.items():
        rep.note(f"{key}: no plan left: {why}.")


def _nothing_left(rep: Report, outcome: SweepOutcome) -> None:
    rep.heading("No plan left to evaluate")
    rep.note("Every plan was pruned before simulating, so there is nothing to rank or plot. Why, per design:")
    for key, why in outcome.plan.empty.items():
        rep.note(f"• {key}: {why}.")


def _failure_scaling(rep: Report, outcome: SweepOutcome) -> None:
    """Days and dollars vs GPUs with and without failures (:mod:`sim.explore.failure_scaling`)."""
    rep.heading("With failures: days and dollars vs GPUs")
    rep.figure(scaling_figure(outcome.rows, f"{outcome.spec.model}: the fewest expected days per design and GPU "
                                            f"count, failures, checkpoints and restarts counted"))
    rep.table(display_rows(scaling.scaling_table(outcome.rows), scaling.SCALING_FORMATS))
    rep.note("Each row is the plan with the fewest expected days at that size. speedup_vs_prev: expected days at the "
             "design's previous size over these, for gpus_ratio times the GPUs (the ideal speed-up equals gpus_ratio; "
             "failure rates grow with the nodes, so at scale a doubling buys less).")


def _results(rep: Report, outcome: SweepOutcome, front: list[Row], checks: Sequence[EngineCheck], top: int) -> None:
    """The Pareto front, best plans, where time goes and the engine's check."""
    rows = outcome.rows
    rep.heading("Time vs cost across designs (Pareto front)")
    rep.figure(pareto_figure(rows, front, _title(outcome)))
    rep.table(shown(front))
    total = outcome.plan.pruned_total
    rep.note(f"{len(rows):,} plans evaluated; pruned before simulating: "
             + ", ".join(f"{k} {v:,}" for k, v in sorted(total.items()) if k != "evaluated") + ".")
    rep.note(FAST_EVALUATOR_NOTE)
    rep.heading("Best plans per design and GPU count")
    rep.table(shown(best_per_design(rows, 3)))
    per_design = max(1, top // len(outcome.spec.points()))
    rep.heading(f"Where the time goes: the {per_design} fastest plan{'s' if per_design > 1 else ''} of each design")
    rep.figure(breakdown_figure(best_per_design(rows, per_design), "Step time by component"))
    if scaling.is_failure_aware(rows):
        _failure_scaling(rep, outcome)
    if checks:
        rep.heading("Top plans re-run on the SimPy engine")
        rep.table(shown_checks(checks))
        best = checks[0]
        rep.heading("Best plan's timeline (engine)")
        rep.note(f"{best.row['design']} × {best.row['gpus']} GPUs, {describe_plan(best.row)}; folded: one "
                 "rank per pipeline stage stands for its TP, CP and DP peers.")
        rep.figure(timeline_figure(best.result.timeline, "Simulated step of the best plan"))
