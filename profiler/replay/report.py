"""HTML report of a replay: step times, metrics before/after, timelines, the critical path."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from profiler.replay.api import METRIC_KEYS, ReplayResult
from profiler.replay.critical_path import CriticalPath
from sim.report.figures import row_name, stacked_timelines
from sim.report.html import PlotlyJs, Report

PATH_COLORS = {"compute": "#4C78A8", "memcpy": "#72B7B2", "communication": "#F58518", "host": "#BAB0AC",
               "waiting": "#E45756"}
MAX_PATH_BARS = 20_000


def _path_overlay(fig: go.Figure, cp: CriticalPath, stage_of: dict[int, int], row: int) -> None:
    """The critical path drawn over a timeline subplot as outlined bars."""
    seg = cp.segments.head(MAX_PATH_BARS)
    if seg.empty:
        return
    fig.add_trace(go.Bar(
        y=[row_name(int(r), str(ln), stage_of) for r, ln in zip(seg["rank"], seg["lane"], strict=True)],
        x=(seg["end_s"] - seg["start_s"]) * 1e3, base=seg["start_s"] * 1e3, orientation="h",
        name="critical path", marker={"color": "rgba(0,0,0,0)", "line": {"color": "#D62728", "width": 2}},
        customdata=seg[["name", "category"]].to_numpy(),
        hovertemplate="%{customdata[0]}<br>%{customdata[1]}<br>%{x:.3f} ms<extra>critical path</extra>",
    ), row=row, col=1)


def path_figure(cp: CriticalPath) -> go.Figure:
    """The critical path alone: one row per rank and lane, bars coloured by category."""
    fig = go.Figure()
    seg = cp.segments.head(MAX_PATH_BARS)
    rows = [f"rank {r} · {ln}" for r, ln in zip(seg["rank"], seg["lane"], strict=True)]
    seg = seg.assign(row=rows)
    for cat, part in seg.groupby("category", sort=True):
        fig.add_trace(go.Bar(y=part["row"], x=(part["end_s"] - part["start_s"]) * 1e3, base=part["start_s"] * 1e3,
                             orientation="h", name=str(cat), marker={"color": PATH_COLORS.get(str(cat), "#999")},
                             customdata=part[["name"]].to_numpy(),
                             hovertemplate="%{customdata[0]}<br>%{x:.3f} ms<extra>" + str(cat) + "</extra>"))
    n = seg["row"].nunique()
    fig.update_layout(title=f"Critical path of rank {cp.rank}'s step {cp.step} ({cp.step_time_s * 1e3:.3f} ms)",
                      barmode="overlay", height=min(1200, 160 + 40 * n), xaxis_title="time (ms)")
    fig.update_yaxes(type="category")
    return fig


def write_replay_report(result: ReplayResult, cp: CriticalPath | None, path: str | Path,
                        plotly_js: PlotlyJs = PlotlyJs.INLINE) -> Path:
    """Step times per rank, metrics, measured / replayed / what-if timelines, critical path."""
    rep = Report(f"trainsim — replay of {result.run_name}")
    if result.whatif.describe():
        rep.note("what-if: " + " ".join(result.whatif.describe()))
    rep.table([{k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}
               for row in result.ranks.to_dict("records")])
    rep.heading("Metrics")
    rep.table([{"timeline": k, **{key: getattr(m, key) for key in METRIC_KEYS}} for k, m in result.metrics().items()])
    timelines = [("measured", result.model.measured["timeline"]), ("replayed (unchanged)", result.base.timeline)]
    if result.changed is not None:
        timelines.append(("what-if: " + " ".join(result.whatif.describe()), result.changed.timeline))
    rep.heading("Timelines")
    fig = stacked_timelines(timelines, "Measured, replayed and what-if steps on one time axis")
    if cp is not None:
        stage_of = {int(k): int(v) for k, v in result.base.timeline.meta.rank_pp.items()}
        _path_overlay(fig, cp, stage_of, row=2)
    rep.figure(fig)
    if cp is not None:
        rep.heading("Critical path (outlined in red above)")
        rep.table([{"category": k, "share": v, "seconds": v * cp.step_time_s} for k, v in cp.shares.items()])
        rep.figure(path_figure(cp))
    rep.heading("Notes")
    for line in result.notes:
        rep.note(line)
    return rep.write(path, plotly_js)
