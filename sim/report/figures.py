"""Plotly figures from Timelines and memory curves (returned, never shown).

A timeline has a row per rank and lane that has something to draw; bars are coloured by kind,
pipeline actions shaded by model chunk and labelled like the schedule's orders (F3, B3c1, W0).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim import intervals
from sim.memory import GIB, MemoryBreakdown, MemoryCurve
from sim.report.bars import BAR_BUDGET, PHASE_LETTER, DisplayBars, display_bars
from sim.report.decimate import decimate_steps
from sim.report.format import short_name
from sim.report.rows import BAR_WIDTH, bar_rows, ordered_rows, row_axis, row_name, row_positions
from sim.report.style import (
    HALF_ROW,
    IDLE_COLOR,
    IDLE_LINE,
    MILLISECONDS,
    SIMULATION,
    TimeAxis,
    TimelineStyle,
    chunk_color,
    legend_rank,
)
from sim.timeline import COMPUTE_LANE, Timeline

PANEL_PX, IDLE_NAME = 110, "idle (bubble)"


def add_timeline(fig: go.Figure, tl: Timeline, row: int | None = None, legend: set[str] | None = None,
                 style: TimelineStyle = SIMULATION, chunks: int | None = None, budget: int = BAR_BUDGET) -> DisplayBars:
    """Add a timeline's bars to ``fig`` (in subplot ``row``). ``legend`` holds the legend entries
    already shown (shared by the panels of one figure: each entry appears once, for every panel);
    ``chunks`` is the model chunks per rank the legend names (default: this timeline's); ``budget``
    the bars it may draw (:func:`sim.report.bars.display_bars`). Returns what was drawn."""
    axis = style.axis
    legend = set() if legend is None else legend
    shown = display_bars(tl, budget=budget)
    stage_of = {int(k): int(v) for k, v in tl.meta.rank_pp.items()}
    bars = shown.bars.assign(row=bar_rows(shown.bars, stage_of))
    pairs = list(zip(bars["rank"], bars["lane"], strict=True))
    order = ordered_rows(pairs + ([(r, COMPUTE_LANE) for r, _ in pairs] if style.shade_idle else []), stage_of)
    chunks = chunks or timeline_chunks(tl)
    for (kind, chunk), part in _trace_groups(bars):
        name = kind if chunks == 1 or kind not in PHASE_LETTER else f"{kind} chunk {chunk}"
        trace = _bar_trace(part, name, chunk_color(kind, chunk, chunks), axis, order).update(
            legendrank=legend_rank(kind, chunk), **_label_layout(part["label"], style))
        _add(fig, trace.update(showlegend=name not in legend), row)
        legend.add(name)
    if style.shade_idle:
        idle = _idle_trace(tl, bars, stage_of, axis, order)
        _add(fig, idle.update(showlegend=IDLE_NAME not in legend, legendrank=legend_rank(IDLE_NAME, 0)), row)
        legend.add(IDLE_NAME)
    fig.update_yaxes(**row_axis(order), **({"row": row, "col": 1} if row else {}))
    return shown


def timeline_chunks(tl: Timeline) -> int:
    """Model chunks per rank in a timeline's pipeline actions (1 without interleaving)."""
    spans = tl.spans
    action = spans["kind"].astype(str).isin(list(PHASE_LETTER)).to_numpy()
    return max(1, int(spans["chunk"].to_numpy()[action].max(initial=0)) + 1)


def _label_layout(labels: pd.Series, style: TimelineStyle) -> dict[str, object]:
    """Uniform labels stay level (hidden where they do not fit); free ones go on two lines
    (F3 over c1) and turn upright where that fits better, so narrow chunk bars keep theirs."""
    if style.uniform_labels or not labels.astype(bool).any():
        return {"textangle": 0}
    return {"text": [t.replace("c", "<br>c", 1) for t in labels]}  # plotly's default angle: "auto"


def _add(fig: go.Figure, trace: go.Bar, row: int | None) -> None:
    fig.add_trace(trace, row=row, col=1 if row else None)


def _trace_groups(bars: pd.DataFrame) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    """(kind, chunk) groups: pipeline actions by chunk, other kinds whole; actions first."""
    chunk = np.where(bars["kind"].isin(list(PHASE_LETTER)), bars["chunk"].clip(lower=0), 0)  # -1: unknown
    groups = bars.assign(_chunk=chunk).groupby(["kind", "_chunk"], sort=True)
    items = [((str(k), int(c)), part) for (k, c), part in groups]
    return sorted(items, key=lambda item: (item[0][0] not in PHASE_LETTER, item[0]))


def _bar_trace(part: pd.DataFrame, name: str, color: str, axis: TimeAxis, order: list[str]) -> go.Bar:
    """One trace of bars; merged communication bars are as opaque as the lane is busy."""
    length = (part["end_s"] - part["start_s"]).to_numpy()
    busy = np.clip(part["busy_s"].to_numpy() / length, 0.0, 1.0)
    marker: dict[str, object] = {"color": color, "line": {"width": 0}}
    if (busy < 0.999).any() and (part["lane"] != COMPUTE_LANE).all():
        marker["opacity"] = _compact(np.round(np.maximum(busy, 0.3), 2))
    labels = part["label"] if part["label"].astype(bool).any() else None
    return go.Bar(
        y=row_positions(part["row"].tolist(), order), x=_compact(length * axis.scale),
        base=binary(part["start_s"].to_numpy() * axis.scale), orientation="h", **_thickness(str(part["kind"].iloc[0])),
        name=name, legendgroup=name, marker=marker, text=labels, textposition="inside" if labels is not None else None,
        insidetextanchor="middle", **_hover(part, busy, name, axis))


def _thickness(kind: str) -> dict[str, float]:
    """A bar's thickness and place in its row: the whole row, or one half for a HALF_ROW kind
    (the y axis runs downwards: a negative offset is the upper half)."""
    half = HALF_ROW.get(kind)
    if half is None:
        return {"width": BAR_WIDTH}
    return {"width": BAR_WIDTH / 2, "offset": -BAR_WIDTH / 2 if half < 0 else 0.0}


def _hover(part: pd.DataFrame, busy: np.ndarray, name: str, axis: TimeAxis) -> dict[str, object]:
    """What hovering a bar shows, in as few bytes a bar as will say it: a pipeline action its
    micro-batch, stage and chunk (its label names it); a bar on a communication, host or copy lane
    how many spans it holds and how busy it is (the trace names the kind); other compute its
    span's name (cut to 80 characters)."""
    u = axis.unit
    when = f"start %{{base:.3f}} {u}, %{{x:.3f}} {u}<extra>{name}</extra>"
    if str(part["kind"].iloc[0]) in PHASE_LETTER:
        data = _small_ints(part[["microbatch", "stage", "chunk"]].to_numpy())
        return {"customdata": data,
                "hovertemplate": f"mb %{{customdata[0]}} stage %{{customdata[1]}} chunk %{{customdata[2]}}<br>{when}"}
    if (part["lane"] != COMPUTE_LANE).all():
        data = _small_ints(np.column_stack([part["spans"].clip(upper=32767), np.round(busy * 100)]))
        return {"customdata": data, "hovertemplate": f"spans %{{customdata[0]}}, busy %{{customdata[1]}}%<br>{when}"}
    return {"hovertext": [short_name(str(n)) for n in part["name"]], "hovertemplate": f"%{{hovertext}}<br>{when}"}


def _idle_trace(tl: Timeline, bars: pd.DataFrame, stage_of: dict[int, int], axis: TimeAxis,
                order: list[str]) -> go.Bar:
    """Hatched bars where each rank's compute lane is idle inside the step window."""
    spans = tl.spans[tl.spans["end_s"] > tl.spans["start_s"]]
    window = (np.array([spans["start_s"].min()]), np.array([spans["end_s"].max()]))
    compute = bars[bars["lane"] == COMPUTE_LANE]
    rows, starts, ends = [], [], []
    for rank in sorted(bars["rank"].unique()):
        mine = compute[compute["rank"] == rank]
        s, e = intervals.subtract(window, (mine["start_s"].to_numpy(), mine["end_s"].to_numpy()))
        rows += [row_name(int(rank), COMPUTE_LANE, stage_of)] * len(s)
        starts.append(s)
        ends.append(e)
    s, e = np.concatenate(starts or [np.empty(0)]), np.concatenate(ends or [np.empty(0)])
    return go.Bar(y=row_positions(rows, order), x=_compact((e - s) * axis.scale), base=binary(s * axis.scale),
                  orientation="h", width=BAR_WIDTH, name=IDLE_NAME,
                  legendgroup=IDLE_NAME, marker={"color": IDLE_COLOR, "line": {"width": 0},
                                                 "pattern": {"shape": "/", "fgcolor": IDLE_LINE, "size": 6}},
                  hovertemplate=f"idle %{{x:.3g}} {axis.unit} from %{{base:.3g}}<extra>{IDLE_NAME}</extra>")


def _compact(values: np.ndarray) -> np.ndarray:
    """Values for drawing: float32 (7 significant digits, far below a screen pixel; plotly sends
    them as binary, 4 bytes each)."""
    return np.asarray(values, dtype=np.float32)


def _small_ints(values: np.ndarray) -> np.ndarray:
    """Integers in the smallest type that holds them (int8 or int16; sent as 1 or 2 bytes each)."""
    small = values.size == 0 or (values.min() >= -128 and values.max() < 128)
    return np.asarray(values, dtype=np.int8 if small else np.int16)


def binary(values: np.ndarray) -> dict[str, str]:
    """float32 values as plotly.js's typed-array spec, for attributes plotly.py would send as
    decimal text (a bar's ``base``): 4 bytes a value instead of ~10."""
    return {"dtype": "f4", "bdata": base64.b64encode(_compact(values).tobytes()).decode("ascii")}


def bar_starts(trace: go.Bar) -> np.ndarray:
    """A bar trace's ``base`` values as numbers (decoding :func:`binary`)."""
    base = trace.base
    if isinstance(base, dict):
        return np.frombuffer(base64.b64decode(base["bdata"]), dtype=np.dtype(base["dtype"]))
    return np.asarray(base, dtype=np.float64)


def drawn_note(shown: Sequence[DisplayBars], axis: TimeAxis = MILLISECONDS) -> str:
    """What the figure (its panels) leaves out, in words ("" when it draws every span)."""
    merged, dropped = sum(s.merged_spans for s in shown), sum(s.dropped_ranks for s in shown)
    notes = []
    if merged:
        coarsest = max(shown, key=lambda s: s.resolution_s)
        gap = coarsest.resolution_s * axis.scale
        notes.append(f"{merged:,} communication spans less than {gap:.3g} {axis.unit} apart (1/{coarsest.screen_px} of "
                     "the step) merged into bars, as opaque as the lane is busy; --chrome-trace has every span")
    if dropped:
        notes.append(f"first ranks only, {dropped} more not drawn")
    return "; ".join(notes)


def timeline_figure(tl: Timeline, title: str, style: TimelineStyle = SIMULATION) -> go.Figure:
    """One timeline: a row per rank and lane, bars coloured by kind, labelled by micro-batch."""
    fig = go.Figure()
    shown = add_timeline(fig, tl, style=style)
    rows = shown.bars.groupby(["rank", "lane"]).ngroups
    fig.update_layout(title={"text": title, "subtitle": {"text": drawn_note([shown], style.axis)}},
                      height=min(2400, max(170 + style.row_px * rows, _legend_px(fig))), xaxis_title=style.axis.title,
                      **_layout(style))
    fig.update_xaxes(range=_x_range(tl, style.axis))
    return fig


def _legend_px(fig: go.Figure) -> int:
    """Height that shows every legend entry without scrolling."""
    return 200 + 30 * sum(1 for t in fig.data if t.showlegend is not False)


def _layout(style: TimelineStyle) -> dict[str, object]:
    """Layout settings every timeline figure shares."""
    labels = {"uniformtext": {"minsize": 8, "mode": "hide"}} if style.uniform_labels else {}
    return {"barmode": "overlay", "legend_title": "kind", **labels}


def _x_range(tl: Timeline, axis: TimeAxis) -> list[float]:
    """From 0 (or the first span) to the last span's end: no padding past the step."""
    spans = tl.spans
    if spans.empty:
        return [0.0, 1.0]
    return [min(0.0, float(spans["start_s"].min())) * axis.scale, float(spans["end_s"].max()) * axis.scale]


def stacked_timelines(timelines: Sequence[tuple[str, Timeline]], title: str,
                      style: TimelineStyle = SIMULATION) -> go.Figure:
    """Several timelines one above the other on one time axis, ticks and title under each panel,
    one legend for all panels (compare, validate, the playground's stacked schedules)."""
    heights = [max(1, t.spans[t.spans["end_s"] > t.spans["start_s"]].groupby(["rank", "lane"], observed=True).ngroups)
               for _, t in timelines]
    total = style.row_px * sum(heights) + PANEL_PX * len(heights) + 100
    fig = make_subplots(rows=len(timelines), cols=1, shared_xaxes=True, subplot_titles=[n for n, _ in timelines],
                        vertical_spacing=min(PANEL_PX / total, 0.9 / max(1, len(timelines) - 1)),
                        row_heights=heights)
    legend: set[str] = set()
    chunks = max(timeline_chunks(tl) for _, tl in timelines)  # one legend: 1F1B's fwd is interleaved's chunk 0
    budget = BAR_BUDGET // len(timelines)  # the figure's bars, shared by its panels
    shown = [add_timeline(fig, tl, row=i, legend=legend, style=style, chunks=chunks, budget=budget)
             for i, (_, tl) in enumerate(timelines, start=1)]
    fig.update_layout(title={"text": title, "subtitle": {"text": drawn_note(shown, style.axis)}},
                      height=min(4000, max(total, _legend_px(fig))), **_layout(style))
    ends = [_x_range(tl, style.axis) for _, tl in timelines]
    fig.update_xaxes(showticklabels=True, title_text=style.axis.title, title_standoff=4,
                     range=[min(e[0] for e in ends), max(e[1] for e in ends)])
    return fig


def memory_figure(curves: dict[int, MemoryCurve], memory: dict[int, MemoryBreakdown],
                  capacity_bytes: float, stage_of: Mapping[int, int]) -> go.Figure:
    """Memory per rank over the step: static states + buffers + activations held (GiB)."""
    fig = go.Figure()
    for rank, curve in sorted(curves.items()):
        static = memory[rank].total - memory[rank].activations
        x = np.concatenate([[0.0], curve.times_s * 1e3])
        y = np.concatenate([[static], static + curve.bytes]) / GIB
        keep = decimate_steps(x, y)
        fig.add_trace(go.Scatter(x=x[keep].astype(np.float32), y=y[keep].astype(np.float32), mode="lines", line_shape="hv",
                                 name=f"rank {rank} (pp {stage_of.get(rank, rank)})"))
    fig.add_hline(y=capacity_bytes / GIB, line_dash="dash", line_color="red",
                  annotation_text="usable HBM", annotation_position="top left")
    fig.update_layout(title="Memory per GPU over the step (params + grads + optimizer + buffers + activations)",
                      xaxis_title="time (ms)", yaxis_title="GiB", height=420)
    return fig
