"""Validation reports: the comparison table and the measured and simulated steps stacked on one
time axis (both shifted to start at 0; the measured step shown is the one closest to the median
step time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from profiler.validate.compare import Comparison
from sim.metrics import rank_windows
from sim.report.figures import stacked_timelines
from sim.report.html import PlotlyJs, Report
from sim.timeline import Timeline


def median_step(tl: Timeline) -> int:
    """The step whose slowest-rank window is closest to the median over steps."""
    lengths: dict[int, float] = {}
    for (_, step), (lo, hi) in rank_windows(tl).items():
        lengths[step] = max(lengths.get(step, 0.0), hi - lo)
    steps = sorted(lengths)
    mid = float(np.median([lengths[s] for s in steps]))
    return min(steps, key=lambda s: (abs(lengths[s] - mid), s))


def one_step(tl: Timeline, step: int) -> Timeline:
    """The spans of ``step``, shifted so that the step starts at 0."""
    part = tl.select(tl.spans["step"] == step)
    windows = [lo for (_, s), (lo, _) in rank_windows(tl).items() if s == step]
    start = min(windows) if windows else float(part.spans["start_s"].min())
    return part.shifted(-start)


def comparison_rows(c: Comparison) -> list[dict[str, Any]]:
    """The figures of one comparison as table rows."""
    return [{k: v for k, v in r.as_dict().items() if k != "error_kind"} for r in c.rows]


def write_validation_report(c: Comparison, path: str | Path, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
    """Table of figures and the two steps stacked (see the module docstring)."""
    measured = c.measured.timeline
    step = median_step(measured)
    rep = Report(f"trainsim — validation of {c.run}")
    rep.table([c.config])
    rep.heading("Measured vs simulated (errors: relative for times, absolute for fractions)")
    rep.table(comparison_rows(c))
    rep.heading("Seconds per step and rank by lane and kind")
    rep.table(c.breakdown.round(6).to_dict("records"))
    rep.heading("Timelines")
    fig = stacked_timelines([(f"measured (step {step})", one_step(measured, step)),
                             ("simulated (step 1)", one_step(c.simulation.timeline, 1))],
                            "Measured and simulated step on one time axis")
    rep.figure(fig)
    return rep.write(path, plotly_js)


def write_suite_report(rows: list[dict[str, Any]], path: str | Path, title: str,
                       floor: dict[str, Any] | None = None, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
    """The suite's table, and the measurement's noise floor beside the simulator's accuracy."""
    rep = Report(title)
    rep.table(rows)
    if floor is not None:
        rep.heading("Noise floor: each recording against the other recordings of its configuration")
        rep.table([floor])
    return rep.write(path, plotly_js)
