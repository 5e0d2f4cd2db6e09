"""The HTML report: predicted vs measured step time on log axes, and the signed error per row."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.colors
import plotly.graph_objects as go

from profiler.validate.published.output import (
    family_rows,
    legend_lines,
    memory_rows,
    summary_line,
    table_rows,
)
from profiler.validate.published.run import MFU_DEFINITION, RowResult
from profiler.validate.published.summary import Summary
from sim.report.html import Report

BANDS = (0.10, 0.25)  # error bands drawn around y = x


def family_colors(results: Sequence[RowResult]) -> dict[str, str]:
    """One colour per family of the simulated rows, in sorted order."""
    palette = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.Dark24
    families = sorted({p.family for p in points(results)})
    return {f: palette[i % len(palette)] for i, f in enumerate(families)}


@dataclass(frozen=True)
class Point:
    """A compared row: its measured and simulated step (s) and error."""

    name: str
    family: str
    measured_s: float
    simulated_s: float
    err: float


def points(results: Sequence[RowResult]) -> list[Point]:
    """The simulated rows that have a measurement, in file order."""
    return [Point(r.row.name, r.row.family, r.row.measured_step_s, r.sim.step_s, r.step_err) for r in results
            if r.sim is not None and r.row.measured_step_s is not None and r.step_err is not None]


def _by_family(results: Sequence[RowResult]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in points(results):
        out.setdefault(p.family, []).append(p)
    return dict(sorted(out.items()))


def scatter_figure(results: Sequence[RowResult]) -> go.Figure:
    """Simulated vs measured step time (log-log), a trace per family, y = x and the error bands."""
    fig = go.Figure()
    colors = family_colors(results)
    groups = _by_family(results)
    values = [v for p in points(results) for v in (p.measured_s, p.simulated_s)]
    lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (0.1, 10.0)
    for band in BANDS:
        for sign in (-1, 1):
            k = 1 + sign * band
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * k, hi * k], mode="lines", name=f"±{band:.0%}",
                                     legendgroup=f"band{band}", showlegend=sign > 0, hoverinfo="skip",
                                     line={"color": "#bbb", "dash": "dot" if band < 0.2 else "dash", "width": 1}))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", hoverinfo="skip",
                             line={"color": "#555", "width": 1}))
    for family, group in groups.items():
        fig.add_trace(go.Scatter(
            x=[p.measured_s for p in group], y=[p.simulated_s for p in group], mode="markers",
            name=family, marker={"color": colors[family], "size": 9},
            customdata=[[p.name, f"{p.err:+.1%}"] for p in group],
            hovertemplate="%{customdata[0]}<br>measured %{x:.4g} s, simulated %{y:.4g} s<br>"
                          "error %{customdata[1]}<extra>" + family + "</extra>"))
    fig.update_xaxes(type="log", title="measured step time (s)", range=[math.log10(lo), math.log10(hi)])
    fig.update_yaxes(type="log", title="simulated step time (s)", range=[math.log10(lo), math.log10(hi)])
    fig.update_layout(title="Published runs: simulated vs measured step time", height=620, width=820)
    return fig


def error_figure(results: Sequence[RowResult]) -> go.Figure:
    """Signed step-time error per row (%), coloured by family, rows in file order."""
    fig = go.Figure()
    colors = family_colors(results)
    order = [p.name for p in points(results)]
    for family, group in _by_family(results).items():
        fig.add_trace(go.Bar(x=[p.name for p in group], y=[100 * p.err for p in group],
                             name=family, marker={"color": colors[family]},
                             hovertemplate="%{x}<br>error %{y:+.1f}%<extra>" + family + "</extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=order, tickangle=-90)  # slanted, the first names ran off the page
    fig.update_yaxes(title="(simulated - measured) / measured (%)", zeroline=True)
    fig.update_layout(title="Signed step-time error per row", height=720, barmode="relative")
    return fig


def write_report(results: Sequence[RowResult], summary: Summary, path: str | Path, source: str) -> Path:
    """Write the self-contained HTML report (atomically)."""
    report = Report(f"trainsim — published GPU runs ({source})")
    report.note(summary_line(summary))
    report.figure(scatter_figure(results))
    report.figure(error_figure(results))
    report.heading("Rows")
    report.table(table_rows(results))
    memory = memory_rows(results)
    if memory:  # only rows whose source states a measured peak
        report.heading("Peak memory per GPU (GiB; sim_gib in the measured kind: reserved = the allocator's "
                       "per-stream pools, each at its peak, summed)")
        report.table(memory)
    report.heading("Families")
    report.table(family_rows(summary))
    skipped = [{"run": r.row.name, "reason": r.reason or ""} for r in results if r.skipped]
    if skipped:
        report.heading("Rows the plan cannot express")
        report.table(skipped)
    report.heading("Assumptions and approximations")
    report.table([{"code": line.split(": ", 1)[0], "note": line.split(": ", 1)[1]} for line in legend_lines(results)])
    report.note(f"MFU: {MFU_DEFINITION}.")
    return report.write(path)
