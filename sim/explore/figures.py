"""Plotly figures of a sweep (returned, never shown): the Pareto front and where time goes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import plotly.graph_objects as go

from sim.explore.display import duration_days, log_ticks, usd, usd_short
from sim.explore.rank import COST, TIME, Row, best_per_design, describe_plan

PALETTE = ("#56B4E9", "#EE3377", "#228833", "#AAAA00", "#AA4499", "#882255", "#CC79A7", "#225522")
"""A colour per design, apart for colour-blind readers (CIEDE2000 >= 12 between any two under normal
vision and simulated deuteranopia, protanopia and tritanopia; Okabe & Ito's and Paul Tol's
schemes, mid-lightness so translucent markers show: see sim.report.style.KIND_COLORS and
tests/sim/test_report_palette.py). As drawn, at the markers' 0.55 opacity over the plot's background,
the closest two are nearer: 8.5 under normal vision, 5.3 under protanopia (#EE3377 and #AA4499); the
legend (a click hides a design) and the hover text tell designs apart where colour does not."""
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")
BREAKDOWN = (("compute_fraction", "compute", "#4C78A8"),
             ("layer_comm_fraction", "exposed TP/CP comm (in layer)", "#F58518"),
             ("transfer_comm_fraction", "exposed DP/PP transfers", "#E45756"),
             ("idle_fraction", "idle (pipeline bubble, waits)", "#BAB0AC"))


def pareto_figure(rows: Sequence[Row], front: Sequence[Row], title: str) -> go.Figure:
    """Every timed plan as time to train vs cost, a colour per design and a symbol per GPU count,
    with the Pareto front across designs drawn as a line. Both axes are logarithmic, with ticks
    labelled in days or hours and in dollars (``$500K``, ``$1M``)."""
    fig = go.Figure()
    gpus = sorted({r["gpus"] for r in rows})
    designs = list(dict.fromkeys(r["design"] for r in rows))
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["design"], r["gpus"]), []).append(r)
    for (design, count), part in groups.items():
        fig.add_trace(go.Scattergl(
            x=[r[TIME] for r in part], y=[r[COST] for r in part], mode="markers", name=f"{design} × {count} GPUs",
            legendgroup=design, marker={"size": 6, "opacity": 0.55, "symbol": SYMBOLS[gpus.index(count) % len(SYMBOLS)],
                                        "color": PALETTE[designs.index(design) % len(PALETTE)]},
            text=[_hover(r, f"{design} × {count} GPUs") for r in part],
            hovertemplate="%{text}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[r[TIME] for r in front], y=[r[COST] for r in front], mode="lines+markers", name="Pareto front",
        line={"color": "black", "width": 2, "shape": "hv"}, marker={"size": 9, "color": "black", "symbol": "star"},
        text=[_hover(r, f"{r['design']} × {r['gpus']}") for r in front], hovertemplate="%{text}<extra>front</extra>"))
    fig.update_layout(title=title, height=500, legend_title="plans (colour: design, symbol: GPU count)",
                      margin={"t": 60, "b": 50})
    x_range, y_range = _view(rows, front)
    _log_axis(fig.update_xaxes, "time to train, days or hours (log scale)", x_range, [r[TIME] for r in rows], duration_days)
    _log_axis(fig.update_yaxes, "cost to train, USD (log scale)", y_range, [r[COST] for r in rows], usd_short)
    return fig


def _hover(r: Row, where: str) -> str:
    return (f"{where} · {describe_plan(r)}<br>step {r['step_time_s']:.3g} s · MFU {r['mfu']:.3f}<br>"
            f"{duration_days(r[TIME])} · {usd(r[COST])} at {usd(r['price_per_gpu_hour_usd'])}/GPU-hour")


def _view(rows: Sequence[Row], front: Sequence[Row]) -> tuple[tuple[float, float], tuple[float, float]]:
    """The axes' opening ranges (data units), around the front and each design's fastest and
    cheapest plan (double-click shows every timed plan)."""
    ref = [*front, *best_per_design(rows, 1), *best_per_design(rows, 1, key=COST)]
    x0, x1 = min(r[TIME] for r in ref), max(r[TIME] for r in ref)
    y0, y1 = min(r[COST] for r in ref), max(r[COST] for r in ref)
    return (x0 / 1.25, x1 * 2), (y0 / 1.5, y1 * 3)


def _log_axis(update: Callable[..., object], title: str, view: tuple[float, float], values: Sequence[float],
              label: Callable[[float], str]) -> None:
    """A log axis opening on ``view``, its ticks as dense as that view allows, laid out over every
    value too (zooming out keeps them labelled)."""
    ticks = log_ticks(view, (min(*values, view[0]), max(*values, view[1])))
    update(type="log", title_text=title, range=[math.log10(view[0]), math.log10(view[1])],
           tickvals=ticks, ticktext=[label(t) for t in ticks], showgrid=True)


def breakdown_figure(rows: Sequence[Row], title: str) -> go.Figure:
    """Per plan, its step split into compute, exposed communication and idle time (seconds)."""
    labels = [f"{r['design']} × {r['gpus']} · {describe_plan(r)}" for r in rows]
    fig = go.Figure()
    for key, name, color in BREAKDOWN:
        fig.add_trace(go.Bar(y=labels, x=[r[key] * r["step_time_s"] for r in rows], name=name, orientation="h",
                             marker_color=color, hovertemplate="%{x:.3g} s<extra>" + name + "</extra>"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="seconds per step (mean over pipeline ranks)",
                      yaxis={"autorange": "reversed"}, height=180 + 34 * len(rows),
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0})
    # the legend sits above the bars: below them it met the axis title once the plot grew tall
    return fig
