"""The report of one simulation (``simulate --report``) and of several (``compare``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim.flow.describe import network_note
from sim.job import describe_job
from sim.memory_summary import timeline_peak
from sim.report.figures import memory_figure, stacked_timelines, timeline_figure
from sim.report.html import PlotlyJs, Report
from sim.report.memory_timeline import memory_timeline_figure
from sim.simulate import SimulationResult
from sim.summary import SUMMARY_KEYS, summarize, usable_hbm_bytes


def describe(result: SimulationResult) -> str:
    """One-line description of a simulated job (the line the command prints first, :func:`sim.job.describe_job`)."""
    return describe_job(result.job)


def _memory_rows(result: SimulationResult) -> list[dict[str, Any]]:
    """Per simulated rank, HBM by category at its peak instant (the memory timeline's, so the
    total is the ``peak_memory_gib`` the summary prints); the static estimate where no timeline."""
    stage_of = result.timeline.meta.rank_pp
    gib = 1024**3
    rows = []
    for r, b in sorted(result.memory.items()):
        mt = result.memory_timelines.get(r)
        if mt is None:
            rows.append({"rank": r, "pp": stage_of[r], **b.gib(), "total": round(b.total / gib, 3)})
        else:
            parts = {k: round(v / gib, 3) for k, v in mt.at_peak().items()}
            rows.append({"rank": r, "pp": stage_of[r], **parts, "total": round(mt.peak_bytes / gib, 3)})
    return rows


def write_simulation_report(result: SimulationResult, path: str | Path,
                            plotly_js: PlotlyJs = PlotlyJs.ASSETS, run: Any = None) -> Path:
    """Summary table, timeline, memory over time, the training run when ``run`` (a
    :class:`sim.run.predict.RunPrediction`) is given, and the model's stated approximations."""
    s = summarize(result)
    rep = Report(f"trainsim — {describe(result)}")
    rep.table([{k: s[k] for k in SUMMARY_KEYS}])
    rep.note(network_note(result.job.fidelity))
    rep.heading("Timeline")
    if result.job.folded and result.job.plan.world_size > len(result.timeline.ranks):
        rep.note("Folded simulation: one rank per pipeline stage stands for its TP, CP and DP peers.")
    rep.figure(timeline_figure(result.timeline, "Simulated step"))
    rep.heading("Memory")
    rep.note("HBM per simulated rank at its peak instant (GiB); the largest total is peak_memory_gib.")
    rep.table(_memory_rows(result))
    rep.figure(memory_figure(result.curves, result.memory, usable_hbm_bytes(result), result.timeline.meta.rank_pp))
    rank, _ = timeline_peak(result)
    if rank in result.memory_timelines:
        mt = result.memory_timelines[rank]
        at = ", ".join(f"{k} {v / 1024**3:.2f}" for k, v in mt.at_peak().items() if v)
        rep.note(f"HBM peak on rank {rank}: {mt.peak_bytes / 1024**3:.2f} GiB at {mt.peak_time_s * 1e3:.1f} ms ({at} GiB).")
        rep.figure(memory_timeline_figure(mt, result.job.cluster.device.hbm_bytes, usable_hbm_bytes(result),
                                          f"HBM over the step by category, rank {rank}"))
    if run is not None:
        from sim.run.report import add_run_section

        add_run_section(rep, run)
    rep.heading("What this model does not capture")
    for line in s["simulation"]["approximations"]:
        rep.note("• " + line)
    return rep.write(path, plotly_js)


def write_compare_report(results: Sequence[SimulationResult], path: str | Path,
                         plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
    """Several simulations: a summary row each, then their timelines on one time axis."""
    rep = Report("trainsim — comparison")
    rows = [{"schedule": r.job.plan.schedule + (f" (vpp {r.job.plan.vpp})" if r.job.plan.vpp > 1 else ""),
             **{k: summarize(r)[k] for k in SUMMARY_KEYS}} for r in results]
    rep.table(rows)
    rep.figure(stacked_timelines([(describe(r), r.timeline) for r in results], "Timelines on one time axis"))
    return rep.write(path, plotly_js)
