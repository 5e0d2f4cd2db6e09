"""Plotly figures of a sweep (returned, never shown): the Pareto front and where time goes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from sim.explore.rank import COST, TIME, Row, describe_plan

SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")
BREAKDOWN = (("compute_fraction", "compute", "#4C78A8"),
             ("layer_comm_fraction", "exposed TP/CP comm (in layer)", "#F58518"),
             ("transfer_comm_fraction", "exposed DP/PP transfers", "#E45756"),
             ("idle_fraction", "idle (pipeline bubble, waits)", "#BAB0AC"))


def pareto_figure(rows: Sequence[Row], front: Sequence[Row], title: str) -> go.Figure:
    """Every plan as time to train vs cost, a colour per design and a symbol per GPU count,
    with the Pareto front across designs drawn as a line."""
    fig = go.Figure()
    gpus = sorted({r["gpus"] for r in rows})
    for design in dict.fromkeys(r["design"] for r in rows):
        part = [r for r in rows if r["design"] == design]
        fig.add_trace(go.Scattergl(
            x=[r[TIME] for r in part], y=[r[COST] for r in part], mode="markers", name=design,
            marker={"size": 6, "opacity": 0.55,
                    "symbol": [SYMBOLS[gpus.index(r["gpus"]) % len(SYMBOLS)] for r in part]},
            text=[f"{r['gpus']} GPUs · {describe_plan(r)}<br>step {r['step_time_s']:.3g} s · MFU {r['mfu']:.3f}"
                  for r in part],
            hovertemplate="%{text}<br>%{x:.3g} days · $%{y:,.0f}<extra>" + design + "</extra>"))
    fig.add_trace(go.Scatter(
        x=[r[TIME] for r in front], y=[r[COST] for r in front], mode="lines+markers", name="Pareto front",
        line={"color": "black", "width": 2, "shape": "hv"}, marker={"size": 9, "color": "black", "symbol": "star"},
        text=[f"{r['design']} × {r['gpus']} · {describe_plan(r)}" for r in front],
        hovertemplate="%{text}<br>%{x:.3g} days · $%{y:,.0f}<extra>front</extra>"))
    fig.update_layout(title=title, xaxis_title="time to train (days)", yaxis_title="cost to train (USD)",
                      xaxis_type="log", yaxis_type="log", height=520, legend_title="design (symbol: GPUs "
                      + ", ".join(f"{SYMBOLS[i % len(SYMBOLS)]}={g}" for i, g in enumerate(gpus)) + ")")
    if front:  # open zoomed on the front (double-click shows every plan)
        x0, x1 = min(r[TIME] for r in front), max(r[TIME] for r in front)
        y0 = min(r[COST] for r in front)
        fig.update_xaxes(range=[math.log10(x0 / 1.25), math.log10(x1 * 2.5)])
        fig.update_yaxes(range=[math.log10(y0 / 1.5), math.log10(y0 * 8)])
    return fig


def breakdown_figure(rows: Sequence[Row], title: str) -> go.Figure:
    """Per plan, its step split into compute, exposed communication and idle time (seconds)."""
    labels = [f"{r['design']} × {r['gpus']} · {describe_plan(r)}" for r in rows]
    fig = go.Figure()
    for key, name, color in BREAKDOWN:
        fig.add_trace(go.Bar(y=labels, x=[r[key] * r["step_time_s"] for r in rows], name=name, orientation="h",
                             marker_color=color, hovertemplate="%{x:.3g} s<extra>" + name + "</extra>"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="seconds per step (mean over pipeline ranks)",
                      yaxis={"autorange": "reversed"}, height=160 + 34 * len(rows), legend_orientation="h")
    return fig
