"""The failure-aware scaling figure of explore's report: days and dollars to train against GPUs
per design (:func:`sim.explore.failure_scaling.scaling_rows`), apart from the tables so that a
sweep without a report does not load plotly. Units: days, US dollars, GPUs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.explore.display import log_ticks, usd_short
from sim.explore.failure_scaling import scaling_rows
from sim.explore.figures import PALETTE
from sim.explore.rank import COST, TIME, Row, describe_plan


def scaling_figure(rows: Sequence[Row], title: str) -> go.Figure:
    """Days (left) and dollars (right) to train against GPUs, per design: expected with failures
    (solid, P10-P90 bars on days), failure-free (dashed), and perfect scaling from the smallest
    count (dotted, days only)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("days to train", "cost to train"), horizontal_spacing=0.1)
    best = scaling_rows(rows)
    for k, design in enumerate(dict.fromkeys(r["design"] for r in best)):
        part = [r for r in best if r["design"] == design]
        _design_traces(fig, part, design, PALETTE[k % len(PALETTE)])
    counts = sorted({r["gpus"] for r in best})
    fig.update_xaxes(type="log", title_text="GPUs (log scale)", tickvals=counts, ticktext=[f"{g:,}" for g in counts])
    days = [v for r in best for v in (r["days_p10"], r["days_p90"], r["failure_free_days"])]
    days += [best[0]["failure_free_days"] * best[0]["gpus"] / counts[-1]] if best else []
    costs = [v for r in best for v in (r[COST], r["failure_free_cost_usd"])]
    _ticks(fig, 1, "days (log scale)", days, lambda v: f"{v:g}")
    _ticks(fig, 2, "USD (log scale)", costs, usd_short)
    fig.update_layout(title=title, height=460, margin={"t": 90},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0})
    return fig


def _ticks(fig: go.Figure, col: int, title: str, values: Sequence[float], label: Callable[[float], str]) -> None:
    """A log y axis of subplot ``col`` with at most 8 readable ticks over ``values``."""
    if not values:
        return
    ticks = log_ticks((min(values), max(values)))
    fig.update_yaxes(type="log", title_text=title, tickvals=ticks, ticktext=[label(t) for t in ticks], row=1, col=col)


def _design_traces(fig: go.Figure, part: Sequence[Row], design: str, color: str) -> None:
    gpus = [r["gpus"] for r in part]
    hover = [f"{design} × {r['gpus']} · {describe_plan(r)}<br>ETTR {r['ettr']:.3f} · "
             f"{r['interruptions']:.0f} interruptions · {usd_short(r[COST])}" for r in part]
    fig.add_trace(go.Scatter(
        x=gpus, y=[r[TIME] for r in part], mode="lines+markers", name=f"{design}: with failures",
        line={"color": color, "width": 2}, text=hover, hovertemplate="%{text}<br>%{y:.3g} days<extra></extra>",
        error_y={"type": "data", "symmetric": False, "array": [r["days_p90"] - r[TIME] for r in part],
                 "arrayminus": [r[TIME] - r["days_p10"] for r in part], "color": color}), row=1, col=1)
    fig.add_trace(go.Scatter(x=gpus, y=[r["failure_free_days"] for r in part], mode="lines+markers",
                             name=f"{design}: failure-free", line={"color": color, "dash": "dash"},
                             marker={"symbol": "circle-open"}), row=1, col=1)
    first = part[0]
    fig.add_trace(go.Scatter(x=gpus, y=[first["failure_free_days"] * first["gpus"] / g for g in gpus], mode="lines",
                             name=f"{design}: perfect scaling", line={"color": color, "dash": "dot", "width": 1}),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=gpus, y=[r[COST] for r in part], mode="lines+markers", name=f"{design}: $ with failures",
                             line={"color": color, "width": 2}, showlegend=False, text=hover,
                             hovertemplate="%{text}<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Scatter(x=gpus, y=[r["failure_free_cost_usd"] for r in part], mode="lines+markers",
                             name=f"{design}: $ failure-free", line={"color": color, "dash": "dash"},
                             marker={"symbol": "circle-open"}, showlegend=False), row=1, col=2)
