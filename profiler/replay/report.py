"""HTML report of a replay: step times, metrics before/after, timelines, the critical path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from profiler.replay.api import METRIC_KEYS, ReplayResult
from profiler.replay.critical_path import CriticalPath
from sim.report.figures import binary, stacked_timelines
from sim.report.format import short_name
from sim.report.html import PlotlyJs, Report
from sim.report.rows import BAR_WIDTH, axis_rows, bar_rows, ordered_rows, row_axis, row_positions

PATH_COLORS = {"compute": "#4C78A8", "memcpy": "#72B7B2", "communication": "#F58518", "host": "#BAB0AC",
               "waiting": "#E45756"}
MAX_PATH_BARS = 20_000


def _path_overlay(fig: go.Figure, cp: CriticalPath, stage_of: dict[int, int], row: int) -> None:
    """The critical path drawn over a timeline subplot as outlined bars."""
    seg = cp.segments.head(MAX_PATH_BARS)
    if seg.empty:
        return
    names = bar_rows(seg, stage_of)
    order = axis_rows(fig.get_subplot(row, 1).yaxis)
    order += [n for n in dict.fromkeys(names) if n not in order]  # a path row where the timeline drew nothing
    fig.update_yaxes(**row_axis(order), row=row, col=1)
    fig.add_trace(go.Bar(
        y=row_positions(names, order), x=_ms(seg["end_s"] - seg["start_s"]), base=binary(seg["start_s"].to_numpy() * 1e3),
        orientation="h", width=BAR_WIDTH, name="critical path", legendrank=5000,  # last in the legend
        marker={"color": "rgba(0,0,0,0)", "line": {"color": "#D62728", "width": 2}}, hovertext=_hover(seg, True),
        hovertemplate="%{hovertext}<br>%{x:.3f} ms<extra>critical path</extra>",
    ), row=row, col=1)


def _ms(seconds: pd.Series) -> np.ndarray:
    """Seconds as float32 milliseconds (drawn; sent as 4 bytes each)."""
    return (seconds.to_numpy() * 1e3).astype(np.float32)


def _hover(seg: pd.DataFrame, with_category: bool) -> list[str]:
    """Each segment's name (cut to 80 characters), and its category."""
    names = [short_name(str(n)) for n in seg["name"]]
    return [f"{n}<br>{c}" for n, c in zip(names, seg["category"], strict=True)] if with_category else names


def path_figure(cp: CriticalPath) -> go.Figure:
    """The critical path alone: one row per rank and lane, bars coloured by category."""
    fig = go.Figure()
    seg = cp.segments.head(MAX_PATH_BARS)
    seg = seg.assign(row=bar_rows(seg, {}))
    order = ordered_rows(zip(seg["rank"], seg["lane"], strict=True), {})
    for cat, part in seg.groupby("category", sort=True):
        fig.add_trace(go.Bar(y=row_positions(part["row"].tolist(), order), x=_ms(part["end_s"] - part["start_s"]),
                             base=binary(part["start_s"].to_numpy() * 1e3), orientation="h", width=BAR_WIDTH,
                             name=str(cat),
                             marker={"color": PATH_COLORS.get(str(cat), "#999")}, hovertext=_hover(part, False),
                             hovertemplate="%{hovertext}<br>%{x:.3f} ms<extra>" + str(cat) + "</extra>"))
    fig.update_layout(title=f"Critical path of rank {cp.rank}'s step {cp.step} ({cp.step_time_s * 1e3:.3f} ms)",
                      barmode="overlay", height=min(1200, 160 + 40 * len(order)), xaxis_title="time (ms)")
    fig.update_yaxes(**row_axis(order))
    return fig


def write_replay_report(result: ReplayResult, cp: CriticalPath | None, path: str | Path,
                        plotly_js: PlotlyJs = PlotlyJs.ASSETS, title: str | None = None) -> Path:
    """Step times per rank, metrics, measured / replayed / what-if timelines, critical path;
    titled ``title`` (default "trainsim — replay of RUN")."""
    rep = Report(title or f"trainsim — replay of {result.run_name}")
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
    steps = "Measured, replayed and what-if steps" if result.changed is not None else "Measured and replayed steps"
    fig = stacked_timelines(timelines, f"{steps} on one time axis")
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
