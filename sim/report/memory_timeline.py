"""Plot one rank's HBM timeline: a stacked area per category, HBM capacity and its usable part."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sim.memory import GIB
from sim.memory_timeline import CATEGORIES, MemoryTimeline
from sim.report.decimate import decimate_steps

BINS = 500  # six stacked curves repeat one time axis: 1/500 of the step per bin keeps the figure ~100 kB
COLORS = {"params": "#4c78a8", "grads": "#f58518", "optimizer": "#e45756", "activations": "#72b7b2",
          "comm_buffers": "#54a24b", "workspace": "#b279a2"}


def memory_timeline_figure(mt: MemoryTimeline, hbm_bytes: float, usable_bytes: float, title: str) -> go.Figure:
    """Stacked step areas (GiB) of each category over the step, with the capacity lines."""
    fig = go.Figure()
    keep = decimate_steps(mt.times_s, mt.total, BINS)
    t_ms = (mt.times_s[keep] * 1e3).astype(np.float32)  # float32: 7 digits, half the bytes
    for cat in CATEGORIES:
        values = (mt.bytes[cat][keep] / GIB).astype(np.float32)
        if not values.any():
            continue
        fig.add_trace(go.Scatter(x=t_ms, y=values, name=cat, mode="lines", stackgroup="hbm",
                                 line={"shape": "hv", "width": 0.5, "color": COLORS[cat]}))
    for y, name, dash in ((hbm_bytes, "HBM capacity", "solid"), (usable_bytes, "HBM minus reserve", "dash")):
        fig.add_trace(go.Scatter(x=[t_ms[0], t_ms[-1]], y=[y / GIB] * 2, name=name, mode="lines",
                                 line={"color": "black", "dash": dash, "width": 1.5}))
    fig.add_trace(go.Scatter(x=[mt.peak_time_s * 1e3], y=[mt.peak_bytes / GIB], name="peak", mode="markers",
                             marker={"symbol": "x", "size": 10, "color": "black"}))
    note = (f"{len(mt.times_s):,} points thinned to {len(keep):,} (per 1/{BINS} of the step the first, last, "
            "lowest and highest total; peaks exact)") if len(keep) < len(mt.times_s) else ""
    fig.update_layout(title={"text": title, "subtitle": {"text": note}}, xaxis_title="time (ms)",
                      yaxis_title="HBM (GiB)", height=420, legend={"orientation": "h", "y": -0.2})
    return fig
