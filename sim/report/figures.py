"""Plotly figures from Timelines and memory curves (returned, never shown)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.chrome_trace import LANE_ORDER
from sim.memory import GIB, MemoryBreakdown, MemoryCurve
from sim.report.bars import display_bars
from sim.timeline import Timeline

KIND_COLORS = {
    "fwd": "#4C78A8", "bwd": "#54A24B", "bwd_input": "#54A24B", "bwd_weight": "#88D27A",
    "optimizer": "#B279A2", "all_reduce": "#F58518", "all_gather": "#E45756", "reduce_scatter": "#FF9DA6",
    "all_to_all": "#9D755D", "broadcast": "#BAB0AC", "send": "#EECA3B", "recv": "#D8B5A5",
    "offload": "#72B7B2", "other": "#BAB0AC",
}


def row_name(rank: int, lane: str, stage_of: dict[int, int]) -> str:
    """Label of a timeline row: "rank 3 (pp 1) · comm.dp"."""
    pp = stage_of.get(rank)
    where = f"rank {rank}" + (f" (pp {pp})" if pp is not None else "")
    return f"{where} · {lane}"


def add_timeline(fig: go.Figure, tl: Timeline, row: int | None = None, show_legend: bool = True) -> int:
    """Add a timeline's bars to ``fig`` (in subplot ``row``); returns ranks left out for size."""
    bars, dropped = display_bars(tl)
    stage_of = {int(k): int(v) for k, v in tl.meta.get("rank_pp", {}).items()}
    lane_rank = {lane: i for i, lane in enumerate(LANE_ORDER)}
    bars = bars.assign(_lane_order=[lane_rank.get(x, 99) for x in bars["lane"]])
    bars = bars.sort_values(["rank", "_lane_order"], kind="stable")
    rows = [row_name(r, ln, stage_of) for r, ln in zip(bars["rank"], bars["lane"], strict=True)]
    bars = bars.assign(row=rows)
    order = list(dict.fromkeys(rows))
    for kind, part in bars.groupby("kind", sort=True):
        fig.add_trace(go.Bar(
            y=part["row"], x=(part["end_s"] - part["start_s"]) * 1e3, base=part["start_s"] * 1e3,
            orientation="h", name=str(kind), legendgroup=str(kind), showlegend=show_legend,
            marker={"color": KIND_COLORS.get(str(kind), "#999"), "line": {"width": 0}},
            text=part["label"], textposition="inside", insidetextanchor="middle",
            customdata=part[["name", "microbatch", "stage", "chunk"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>mb %{customdata[1]} stage %{customdata[2]} chunk %{customdata[3]}"
                          "<br>start %{base:.3f} ms, %{x:.3f} ms<extra>" + str(kind) + "</extra>",
        ), row=row, col=1 if row else None)
    yaxis = {"categoryorder": "array", "categoryarray": order[::-1], "type": "category"}
    if row:
        fig.update_yaxes(**yaxis, row=row, col=1)
    else:
        fig.update_yaxes(**yaxis)
    return dropped


def timeline_figure(tl: Timeline, title: str) -> go.Figure:
    """One timeline: a row per rank and lane, bars coloured by kind, labelled by micro-batch."""
    fig = go.Figure()
    dropped = add_timeline(fig, tl)
    note = f" (first ranks only; {dropped} more not drawn)" if dropped else ""
    rows = tl.spans.groupby(["rank", "lane"], observed=True).ngroups
    fig.update_layout(title=title + note, barmode="overlay", height=min(2400, 160 + 28 * rows),
                      xaxis_title="time (ms)", legend_title="kind", bargap=0.25,
                      uniformtext={"minsize": 8, "mode": "hide"})
    return fig


def stacked_timelines(timelines: Sequence[tuple[str, Timeline]], title: str) -> go.Figure:
    """Several timelines one above the other on one time axis (compare, validate)."""
    heights = [max(1, t.spans.groupby(["rank", "lane"], observed=True).ngroups) for _, t in timelines]
    fig = make_subplots(rows=len(timelines), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[name for name, _ in timelines], row_heights=heights)
    for i, (_, tl) in enumerate(timelines, start=1):
        add_timeline(fig, tl, row=i, show_legend=i == 1)
    fig.update_layout(title=title, barmode="overlay", height=min(3000, 200 + 26 * sum(heights) + 60 * len(heights)),
                      legend_title="kind", bargap=0.25, uniformtext={"minsize": 8, "mode": "hide"})
    fig.update_xaxes(title_text="time (ms)", row=len(timelines), col=1)
    return fig


def memory_figure(curves: dict[int, MemoryCurve], memory: dict[int, MemoryBreakdown],
                  capacity_bytes: float, stage_of: dict[int, int]) -> go.Figure:
    """Memory per rank over the step: static states + buffers + activations held (GiB)."""
    fig = go.Figure()
    for rank, curve in sorted(curves.items()):
        static = memory[rank].total - memory[rank].activations
        x = [0.0, *(curve.times_s * 1e3)]
        y = [static / GIB, *((static + curve.bytes) / GIB)]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv",
                                 name=f"rank {rank} (pp {stage_of.get(rank, rank)})"))
    fig.add_hline(y=capacity_bytes / GIB, line_dash="dash", line_color="red",
                  annotation_text="usable HBM", annotation_position="top left")
    fig.update_layout(title="Memory per GPU over the step (params + grads + optimizer + buffers + activations)",
                      xaxis_title="time (ms)", yaxis_title="GiB", height=420)
    return fig
