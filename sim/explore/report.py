"""The sweep report: Pareto front across designs, best plans, where time goes, and the engine's
check of the top plans with the best plan's timeline (self-contained HTML, Plotly inlined)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.explore.figures import breakdown_figure, pareto_figure
from sim.explore.rank import Row, best_per_design, describe_plan, pareto_front, ranked, table_rows
from sim.explore.sweep import SweepOutcome, job_of
from sim.report.figures import timeline_figure
from sim.report.html import PlotlyJs, Report
from sim.simulate import SimulationResult, simulate
from sim.summary import APPROXIMATIONS

FAST_EVALUATOR_NOTE = (
    "Plans are timed by trainsim's fast evaluator: the simulator's own task graph rules and cost "
    "model (roofline compute, analytic alpha-beta collectives over the cluster graph), timed by a "
    "longest-path pass instead of the SimPy engine. It equals the engine's step time exactly unless "
    "a pipeline send and a DP transfer share a node's network at the same moment (column "
    "'contention'), where the engine splits the bandwidth and its step is slightly longer; the top "
    "plans are re-run on the engine below.")


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


def check_on_engine(outcome: SweepOutcome, rows: Sequence[Row]) -> list[EngineCheck]:
    """Simulate ``rows`` with the full (folded) SimPy engine."""
    return [EngineCheck(r, simulate(job_of(outcome.spec, r))) for r in rows]


def write_sweep_report(outcome: SweepOutcome, out_dir: str | Path, checks: Sequence[EngineCheck],
                       top: int = 10, plotly_js: PlotlyJs = PlotlyJs.INLINE) -> dict[str, Path]:
    """Write report.html and pareto.html (the Pareto figure alone) into ``out_dir``."""
    spec, rows = outcome.spec, outcome.rows
    front = pareto_front(rows)
    title = f"{spec.model}, {spec.tokens:.3g} tokens, global batch {spec.global_batch}: time vs cost"
    rep = Report(f"trainsim explore — {spec.model} on {', '.join(spec.clusters)} × {', '.join(map(str, spec.gpus))} GPUs")
    total = outcome.plan.pruned_total
    rep.note(f"{len(rows)} plans evaluated; pruned before simulating: "
             + ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if k != "evaluated") + ".")
    rep.note(FAST_EVALUATOR_NOTE)
    rep.heading("Time vs cost across designs (Pareto front)")
    rep.figure(pareto_figure(rows, front, title))
    rep.table(table_rows(front))
    rep.heading("Best plans per design and GPU count")
    rep.table(table_rows(best_per_design(rows, 3)))
    rep.heading(f"Where the time goes: the {top} fastest plans")
    rep.figure(breakdown_figure(ranked(rows)[:top], "Step time by component"))
    if checks:
        rep.heading("Top plans re-run on the SimPy engine")
        rep.table([c.as_row() for c in checks])
        best = checks[0]
        rep.heading("Best plan's timeline (engine)")
        rep.note(f"{best.row['design']} × {best.row['gpus']} GPUs, {describe_plan(best.row)}; folded: one "
                 "rank per pipeline stage stands for its TP, CP and DP peers.")
        rep.figure(timeline_figure(best.result.timeline, "Simulated step of the best plan"))
    rep.heading("Pruned before simulating (plans per reason)")
    rep.table([{"design/gpus": k, **v} for k, v in outcome.plan.pruned.items()])
    rep.heading("What this model does not capture")
    for line in APPROXIMATIONS:
        rep.note("• " + line)
    out = Path(out_dir)
    pareto = Report(f"trainsim explore — {spec.model} on {', '.join(spec.clusters)}")
    pareto.figure(pareto_figure(rows, front, title))
    return {"report": rep.write(out / "report.html", plotly_js), "pareto": pareto.write(out / "pareto.html", plotly_js)}
