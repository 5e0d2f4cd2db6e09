"""The report section of a training run: a strip of the run's first days (training, checkpoints,
failures, restarts, repair waits), the loss waterfall, the days-to-train distribution and the
step's power waveform. Plotting functions return figures (DESIGN.md)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from sim.report.decimate import decimate_steps
from sim.report.figures import timeline_figure
from sim.report.html import Report
from sim.report.style import SIMULATION
from sim.run.predict import RunPrediction

DAY, HOUR = 86400.0, 3600.0
STRIP_HOURS = 48.0
COLORS = {"training": "#0077BB", "lost work": "#CC3311", "restart": "#EE7733", "repair wait": "#BBBBBB"}
"""Paul Tol's vibrant blue, red and orange and his grey: CIEDE2000 >= 14 between any two under
normal and simulated colour-blind vision (the former green and red were one colour to a
deuteranope; tests/sim/test_report_palette.py)."""
HEADLINE = ("reliability", "rates_count", "ettr", "interruptions", "mtti_h", "checkpoint_interval_s",
            "checkpoint_mode", "days_failure_free", "days_p10", "days_p50", "days_p90", "gpu_hours", "cost_usd",
            "energy_mwh", "energy_gpus_mwh", "energy_tdp_bound_mwh")


def add_run_section(rep: Report, run: RunPrediction) -> None:
    """Append the training-run section to ``rep``."""
    rep.heading("Training run: days, dollars, energy")
    rep.note(f"Failure rates: {run.json['source']} (they count {run.json['rates_count']} causes). "
             f"{run.json['monte_carlo']['samples']} simulated runs, seed {run.json['monte_carlo']['seed']}.")
    rep.table([{k: run.json[k] for k in HEADLINE if k in run.json}])
    rep.figure(strip_figure(run))
    rep.figure(waterfall_figure(run))
    rep.figure(days_figure(run))
    if run.snapshot is not None and run.snapshot.timeline is not None:
        rep.figure(snapshot_figure(run))
    if run.wave is not None and run.profile is not None:
        rep.figure(power_figure(run))


def strip_events(run: RunPrediction, hours: float = STRIP_HOURS) -> list[tuple[str, float, float]]:
    """(state, start_h, end_h) of one sampled run's first ``hours`` (seeded like the Monte Carlo;
    training spans include their checkpoints)."""
    m, rng = run.model, np.random.default_rng(run.inputs.seed)
    seg, t, out = m.interval_s + m.checkpoint.blocking_s, 0.0, []
    end = min(hours * HOUR, m.expected_wall_s)
    while t < end:
        up = rng.exponential(1.0 / m.rate_s) if m.rate_s > 0 else math.inf
        whole = min(math.floor(up / seg), math.ceil((end - t) / seg))
        if whole > 0:  # whole segments as one bar: a checkpoint of seconds is invisible at this scale
            out.append(("training", t, t + whole * seg))
            t += whole * seg
        if t >= end or not math.isfinite(up):
            break
        lost = up - whole * seg
        c = int(rng.choice(m.draws.probability.size, p=m.draws.probability))
        wait = m.draws.repair_s[c] if rng.random() < m.draws.wait_probability else 0.0
        for state, length in (("lost work", lost), ("restart", m.draws.restart_s[c]), ("repair wait", wait)):
            if length > 0:
                out.append((state, t, t + length))
                t += length
    return [(s, a / HOUR, b / HOUR) for s, a, b in out if a < end]


def strip_figure(run: RunPrediction) -> go.Figure:
    """The run's first hours as one horizontal strip."""
    fig = go.Figure()
    for state, color in COLORS.items():
        ev = [(a, b) for s, a, b in strip_events(run) if s == state]
        fig.add_trace(go.Bar(y=["run"] * len(ev), x=[b - a for a, b in ev], base=[a for a, _ in ev],
                             orientation="h", marker_color=color, name=state, hovertemplate="%{base:.2f} h +%{x:.3f} h"))
    fig.update_layout(title=f"One sampled run, first {STRIP_HOURS:.0f} hours (training includes a checkpoint every "
                            f"{run.model.interval_s:.0f} s blocking {run.model.checkpoint.blocking_s:.2f} s)", barmode="overlay", height=240,
                      xaxis_title="hours", margin={"t": 90},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0})
    return fig


def waterfall_figure(run: RunPrediction) -> go.Figure:
    """Failure-free days, then what checkpoints, lost work, restarts, repair and slowed ranks add."""
    b, wall = run.model.breakdown, run.model.expected_wall_s / DAY
    parts = [("failure-free", run.model.work_s / DAY, "absolute"), ("checkpoints", b.checkpoint * wall, "relative"),
             ("lost work", b.lost_work * wall, "relative"), ("restarts", b.restart * wall, "relative"),
             ("repair waits", b.repair_wait * wall, "relative"), ("slow ranks", b.slow_rank * wall, "relative"),
             ("expected", wall, "total")]
    fig = go.Figure(go.Waterfall(x=[p[0] for p in parts], y=[p[1] if p[2] != "total" else 0 for p in parts],
                                 measure=[p[2] for p in parts], text=[f"{p[1]:.2f}" for p in parts],
                                 textposition="outside"))
    low = run.model.work_s / DAY
    fig.update_layout(title="Where the days go (expected, closed form)", yaxis_title="days", height=380,
                      yaxis_range=[0.97 * low, low + 1.15 * (wall - low) + 0.01 * low])
    return fig


def snapshot_figure(run: RunPrediction) -> go.Figure:
    """The checkpoint's device-to-host snapshot on the simulated timeline: two steps, the copy on
    each rank's copy stream between them, zoomed on the step boundary."""
    snap = run.snapshot
    assert snap is not None and snap.timeline is not None
    fig = timeline_figure(snap.timeline, f"Checkpoint snapshot on the copy stream ('checkpoint d2h', memcpy lane): "
                                         f"copy {snap.copy_s:.3g} s, training waits {snap.blocking_s:.3g} s")
    start, end = snap.window_s
    pad = max(end - start, 1e-6) * 3
    fig.update_xaxes(range=[(start - pad) * SIMULATION.axis.scale, (end + pad) * SIMULATION.axis.scale])
    return fig


def days_figure(run: RunPrediction) -> go.Figure:
    """Histogram of days to train over the simulated runs, with P10/P50/P90."""
    days = run.samples.wall_s / DAY
    fig = go.Figure(go.Histogram(x=days, nbinsx=50, name="runs"))
    for q, key in ((10, "days_p10"), (50, "days_p50"), (90, "days_p90")):
        fig.add_vline(x=run.json[key], line_dash="dash", annotation_text=f"P{q} {run.json[key]:.2f}")
    fig.update_layout(title="Days to train (Monte Carlo)", xaxis_title="days", yaxis_title="runs", height=360)
    return fig


def power_figure(run: RunPrediction) -> go.Figure:
    """One node's power over the simulated step (a step function), with its mean and rating."""
    assert run.wave is not None and run.profile is not None
    node = run.wave.node_w(run.profile, run.gpus_per_node) / 1e3
    x, y = np.repeat(run.wave.times_s, 2)[1:-1], np.repeat(node, 2)
    keep = decimate_steps(x, y)  # a pixel's first, last, lowest and highest point: every peak kept
    fig = go.Figure(go.Scatter(x=x[keep].astype(np.float32), y=y[keep].astype(np.float32), mode="lines",
                               name="node kW", line_shape="linear"))
    fig.add_hline(y=run.json["power"]["node_mean_kw"], line_dash="dash", annotation_text="mean")
    if run.profile.node_rated_w:
        fig.add_hline(y=run.profile.node_rated_w / 1e3, line_dash="dot", annotation_text="rated")
    fig.update_layout(title=f"Power of one node over the simulated step (cluster swing "
                            f"{run.json['power']['swing_mw']:.2f} MW when every GPU waits)",
                      xaxis_title="seconds", yaxis_title="kW", height=360)
    return fig

