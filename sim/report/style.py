"""Colours and axes of the timeline figures: a colour per kind, a shade per model chunk, and the
unit the time axis is drawn in (milliseconds for simulations, units of one forward for the
schedule playground)."""

from __future__ import annotations

from dataclasses import dataclass

from plotly.colors import find_intermediate_color, hex_to_rgb

KIND_COLORS = {
    # compute lanes: distinct at any chunk shade (pipeline kinds are drawn dark for chunk 0, light for the last)
    "fwd": "#332288", "bwd": "#44AA99", "bwd_input": "#CC3311", "bwd_weight": "#F0E442", "optimizer": "#000000",
    # communication, host and copy lanes
    "all_reduce": "#EE3377", "all_gather": "#0077BB", "reduce_scatter": "#77AADD", "all_to_all": "#117733",
    "send": "#004488", "recv": "#999933", "broadcast": "#99DDFF", "offload": "#FFAABB", "other": "#555555",
}
"""A colour per kind, safe for colour-blind readers. Source: Paul Tol's qualitative schemes
(muted, vibrant, bright, light, dark; https://personal.sron.nl/~pault/, "Colour schemes and
templates", 2021), Okabe & Ito's yellow (#F0E442, "Color Universal Design", 2002) and black, picked so
that kinds sharing a row type stay apart under normal vision and simulated deuteranopia,
protanopia and tritanopia (Machado et al. 2009, severity 1): CIEDE2000 >= 12 between compute kinds
and their two chunk shades (>= 7 with three: one hue's middle shade), >= 10 between communication
kinds, and >= 9 between any two kinds one legend shows (normal vision; the former send colour
#CCBB44 was 2.7 from bwd_weight's chunk-0 shade, two olives in one compare legend)
(tests/sim/test_report_palette.py). send is Tol's high-contrast dark blue.
The former Tableau 10 colours drew bwd and bwd_input alike, bwd beside its chunk-0 shade, and
bwd and all_gather at CIEDE2000 1.2 under deuteranopia."""
HALF_ROW = {"all_gather": -1, "reduce_scatter": 1, "send": -1, "recv": 1}
"""Kinds that share a lane and overlap in time (ZeRO's and sequence parallelism's gathers and
reductions; a stage's sends and receives): each drawn in one half of the row (-1 upper, 1 lower),
so neither hides the other. Other kinds fill the row."""
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
