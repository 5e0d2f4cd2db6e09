"""Colours and axes of the timeline figures: a colour per kind, a shade per model chunk, and the
unit the time axis is drawn in (milliseconds for simulations, units of one forward for the
schedule playground)."""

from __future__ import annotations

from dataclasses import dataclass

from plotly.colors import find_intermediate_color, hex_to_rgb

KIND_COLORS = {
    "fwd": "#4C78A8", "bwd": "#54A24B", "bwd_input": "#54A24B", "bwd_weight": "#88D27A",
    "optimizer": "#B279A2", "all_reduce": "#F58518", "all_gather": "#E45756", "reduce_scatter": "#FF9DA6",
    "all_to_all": "#9D755D", "broadcast": "#BAB0AC", "send": "#EECA3B", "recv": "#D8B5A5",
    "offload": "#72B7B2", "other": "#BAB0AC",
}
LEGEND_ORDER = ("fwd", "bwd", "bwd_input", "bwd_weight", "idle (bubble)", "optimizer")  # then the rest, A-Z
IDLE_COLOR = "rgba(120, 120, 120, 0.10)"
IDLE_LINE = "#8C8C8C"


@dataclass(frozen=True)
class TimeAxis:
    """How seconds are drawn: ``value = seconds * scale``, axis titled ``title``, hover in ``unit``."""

    scale: float = 1e3
    title: str = "time (ms)"
    unit: str = "ms"


MILLISECONDS = TimeAxis()


def forward_units(forward_s: float) -> TimeAxis:
    """A time axis in units of one forward pass of ``forward_s`` seconds (seconds if it is 0)."""
    if forward_s <= 0:
        return TimeAxis(1.0, "time (units of --fwd/--bwd)", "units")
    return TimeAxis(1.0 / forward_s, "time (units of one forward, --fwd)", "fwd")


@dataclass(frozen=True)
class TimelineStyle:
    """How a timeline figure is drawn.

    Attributes:
        axis: the time axis' unit.
        shade_idle: hatch the time each rank's compute lane is idle (the bubble).
        row_px: height of one rank-and-lane row (pixels).
        uniform_labels: one label size for every bar, level, labels that do not fit at 8 px hidden
            (dense simulation timelines); otherwise each label is sized to its bar, chunk labels on
            two lines, turned upright where that fits better (the playground: a label on every block).
    """

    axis: TimeAxis = MILLISECONDS
    shade_idle: bool = False
    row_px: int = 26
    uniform_labels: bool = True


SIMULATION = TimelineStyle()


def legend_rank(kind: str, chunk: int) -> int:
    """Plotly legendrank of a kind's entry: pipeline actions by phase and chunk, then the rest."""
    if kind in LEGEND_ORDER:
        return 1000 + 10 * LEGEND_ORDER.index(kind) + chunk
    return 2000 + sorted(KIND_COLORS).index(kind) if kind in KIND_COLORS else 3000


def chunk_color(kind: str, chunk: int, chunks: int) -> str:
    """The kind's colour, a darker shade for chunk 0 and lighter ones for later chunks."""
    base = KIND_COLORS.get(kind, "#999999")
    if chunks <= 1:
        return base
    rgb = hex_to_rgb(base)
    dark = tuple(0.8 * c for c in rgb)
    light = find_intermediate_color(rgb, (255, 255, 255), 0.55)
    r, g, b = find_intermediate_color(dark, light, chunk / (chunks - 1))
    return f"rgb({round(r)}, {round(g)}, {round(b)})"
