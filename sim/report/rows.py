"""The rows of a timeline figure: one per rank and lane, drawn at integer positions 0, 1, 2...
(top to bottom) on a numeric y axis whose tick labels name them ("rank 3 (pp 1) · comm.dp").

Bars carry their row as a small integer (sent as binary, 1-2 bytes a bar) instead of the row's
name (about 30 bytes a bar): a 70B step's 27k bars save ~0.8 MB of HTML this way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.chrome_trace import LANE_ORDER

BAR_WIDTH = 0.75  # a bar's thickness in rows: every trace must set it (plotly sizes bars on a numeric
# axis by the trace's closest two positions, so a trace on rows 0, 3, 6 would draw bars 3 rows thick)


def row_name(rank: int, lane: str, stage_of: dict[int, int]) -> str:
    """Label of a timeline row: "rank 3 (pp 1) · comm.dp"."""
    pp = stage_of.get(rank)
    where = f"rank {rank}" + (f" (pp {pp})" if pp is not None else "")
    return f"{where} · {lane}"


def ordered_rows(pairs: Iterable[tuple[int, str]], stage_of: dict[int, int]) -> list[str]:
    """Row names of (rank, lane) pairs, by rank, then lanes in LANE_ORDER (others A-Z), once each."""
    lane_rank = {str(lane): i for i, lane in enumerate(LANE_ORDER)}
    unique = sorted(set(pairs), key=lambda p: (p[0], lane_rank.get(p[1], len(LANE_ORDER)), p[1]))
    return [row_name(int(r), str(ln), stage_of) for r, ln in unique]


def row_positions(rows: Sequence[str], order: Sequence[str]) -> npt.NDArray[np.integer]:
    """Each row name's position in ``order`` (int8 below 128 rows, else int16: 1-2 bytes a bar)."""
    where = {name: i for i, name in enumerate(order)}
    return np.fromiter((where[r] for r in rows), dtype=np.int8 if len(order) < 128 else np.int16, count=len(rows))


def bar_rows(bars: pd.DataFrame, stage_of: dict[int, int]) -> list[str]:
    """The row name of each bar (columns rank and lane)."""
    return [row_name(int(r), str(ln), stage_of) for r, ln in zip(bars["rank"], bars["lane"], strict=True)]


def row_axis(order: Sequence[str]) -> dict[str, Any]:
    """y-axis settings that draw ``order`` top to bottom with their names as tick labels."""
    n = max(1, len(order))
    return {"type": "linear", "tickmode": "array", "tickvals": list(range(len(order))), "ticktext": list(order),
            "range": [n - 0.5, -0.5], "zeroline": False, "showgrid": False}


def axis_rows(layout_axis: Any) -> list[str]:
    """The row names a y axis set by :func:`row_axis` draws, top to bottom."""
    return list(layout_axis.ticktext or ())


def trace_rows(fig: Any, trace: Any) -> list[str]:
    """The row name of each bar of ``trace`` in ``fig`` (read back from its y axis' labels)."""
    names = axis_rows(fig.layout["yaxis" + (trace.yaxis or "y")[1:]])
    return [names[int(i)] for i in trace.y]
