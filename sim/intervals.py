"""Interval arithmetic on numpy arrays: unions, intersections and lengths of span sets (seconds)."""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted, disjoint (starts, ends); empty ones are dropped."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    new_block = np.empty(starts.size, dtype=bool)
    new_block[0] = True
    new_block[1:] = starts[1:] > running_end[:-1]
    block_id = np.cumsum(new_block) - 1
    merged_starts = starts[new_block]
    merged_ends = np.zeros(merged_starts.size)
    np.maximum.at(merged_ends, block_id, running_end)
    return merged_starts, merged_ends


def length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of a union of intervals."""
    s, e = merge(starts, ends)
    return float((e - s).sum())


def clip(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi)."""
    return np.clip(starts, lo, hi), np.clip(ends, lo, hi)


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """|A ∩ B| for two unions of intervals, each given as merged (starts, ends)."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return 0.0
    # Sweep: boundaries of both sets; coverage count 2 means both are active.
    points = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate([np.ones(a_s.size), -np.ones(a_e.size), np.ones(b_s.size), -np.ones(b_e.size)])
    order = np.lexsort((delta, points))  # ends (-1) before starts (+1) at equal times
    points, delta = points[order], delta[order]
    coverage = np.cumsum(delta)
    widths = np.diff(points)
    return float(widths[coverage[:-1] >= 2].sum())
