"""Interval arithmetic on numpy arrays: unions, intersections, differences, point lookups.

An interval set is a pair ``(starts, ends)`` of float arrays with ``starts <= ends``, in any unit.
Functions named ``union``/``intersect``/``subtract`` return *normalised* sets: sorted, disjoint,
with touching intervals merged and empty intervals dropped. Everything is sort + cumulative
sums, O(n log n), with no Python loop over intervals, so a million spans stay cheap.

Nothing here knows about traces or simulations: the Timeline metrics and the trace parser share it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Intervals = tuple[FloatArray, FloatArray]


def _as_pair(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    s = np.asarray(starts, dtype=np.float64).ravel()
    e = np.asarray(ends, dtype=np.float64).ravel()
    if s.shape != e.shape:
        raise ValueError(f"starts and ends differ in length: {s.size} vs {e.size}")
    return s, e


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """The union of intervals as sorted, disjoint intervals (touching ones merged)."""
    s, e = _as_pair(starts, ends)
    if is_normalised(s, e):
        return s.copy(), e.copy()
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if not bool(np.all(s[1:] >= s[:-1])):  # spans of a Timeline's rank come sorted by start
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new group starts where an interval begins after everything before it has ended.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def is_normalised(s: FloatArray, e: FloatArray) -> bool:
    """Whether ``(s, e)`` is already a normalised set (non-empty intervals, each starting after
    the previous one ended): what :func:`union` returns, so it can be returned as it is. A
    linear check, cheaper than the sort it saves (unions of unions are common: metrics
    intersect the unions they made)."""
    return bool(np.all(e > s)) and bool(np.all(s[1:] > e[:-1]))


def total_length(starts: npt.ArrayLike, ends: npt.ArrayLike) -> float:
    """Measure of the union of the intervals (overlaps counted once)."""
    s, e = union(starts, ends)
    return float(np.sum(e - s))


def _coverage(sets: list[Intervals]) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """Boundary times and, per set, how many of its (normalised) intervals cover each segment.

    Returns ``(times, counts)`` where ``counts[k, i]`` is the coverage of set k on the segment
    ``[times[i], times[i + 1])``.
    """
    times_l, deltas_l = [], []
    for k, (s, e) in enumerate(sets):
        d = np.zeros((len(sets), 2 * s.size), dtype=np.int64)
        d[k, : s.size] = 1
        d[k, s.size:] = -1
        times_l.append(np.concatenate([s, e]))
        deltas_l.append(d)
    times = np.concatenate(times_l)
    deltas = np.concatenate(deltas_l, axis=1)
    order = np.argsort(times, kind="stable")
    return times[order], np.cumsum(deltas[:, order], axis=1)


def _segments(times: FloatArray, mask: BoolArray) -> Intervals:
    """Normalised intervals made of the segments ``[times[i], times[i+1])`` where mask[i]."""
    if times.size < 2:
        return np.empty(0), np.empty(0)
    idx = np.flatnonzero(mask[:-1])
    return union(times[idx], times[idx + 1])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intervals covered by both ``a`` and ``b``: of each overlapping pair of their normalised
    intervals, [max of starts, min of ends]. Two such pieces never touch (a normalised set's
    intervals are separated by gaps), so the pieces, in order, are the normalised intersection."""
    (sa, ea), (sb, eb) = union(*a), union(*b)
    if sa.size == 0 or sb.size == 0:
        return np.empty(0), np.empty(0)
    first = np.searchsorted(eb, sa, side="right")  # b's first interval ending after a[i] starts
    stop = np.searchsorted(sb, ea, side="left")  # b's intervals starting before a[i] ends
    count = np.maximum(stop - first, 0)
    i = np.repeat(np.arange(sa.size), count)
    j = np.arange(i.size) + np.repeat(first - np.cumsum(count) + count, count)
    s, e = np.maximum(sa[i], sb[j]), np.minimum(ea[i], eb[j])
    keep = e > s
    return s[keep], e[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Intervals covered by ``a`` but not by ``b``."""
    ua, ub = union(*a), union(*b)
    if ua[0].size == 0 or ub[0].size == 0:
        return ua
    times, cov = _coverage([ua, ub])
    return _segments(times, (cov[0] > 0) & (cov[1] == 0))


def intersection_length(a: Intervals, b: Intervals) -> float:
    """Measure of ``union(a) ∩ union(b)``."""
    s, e = intersect(a, b)
    return float(np.sum(e - s))


def contains(points: npt.ArrayLike, starts: FloatArray, ends: FloatArray) -> BoolArray:
    """For sorted disjoint intervals, whether each point lies in one (closed interval)."""
    p = np.asarray(points, dtype=np.float64)
    if starts.size == 0:
        return np.zeros(p.shape, dtype=bool)
    idx = np.searchsorted(starts, p, side="right") - 1
    ok = idx >= 0
    out = np.zeros(p.shape, dtype=bool)
    out[ok] = ends[idx[ok]] >= p[ok]
    return out


def enclosing_index(points: npt.ArrayLike, starts: FloatArray, ends: FloatArray) -> IntArray:
    """Index of the interval containing each point, -1 if none.

    ``starts`` must be sorted and the intervals must not nest inside each other (each point
    then lies in at most one interval, the last one starting at or before it).
    """
    p = np.asarray(points, dtype=np.float64)
    if starts.size == 0:
        return np.full(p.shape, -1, dtype=np.int64)
    idx = np.searchsorted(starts, p, side="right").astype(np.int64) - 1
    ok = idx >= 0
    ok[ok] = ends[idx[ok]] >= p[ok]
    return np.where(ok, idx, -1)


def top_level_mask(starts: npt.ArrayLike, ends: npt.ArrayLike) -> BoolArray:
    """Which intervals are not nested in (or overlapping) an interval that started earlier.

    Ties in start put the longer interval first, so a child that starts with its parent is
    still a child. Returned in the input order.
    """
    s, e = _as_pair(starts, ends)
    out = np.zeros(s.size, dtype=bool)
    if s.size == 0:
        return out
    order = np.lexsort((-e, s))
    ss, ee = s[order], e[order]
    reach = np.maximum.accumulate(ee)
    top = np.empty(s.size, dtype=bool)
    top[0] = True
    top[1:] = ss[1:] >= reach[:-1]
    out[order] = top
    return out


def clip(starts: npt.ArrayLike, ends: npt.ArrayLike, lo: float, hi: float) -> Intervals:
    """Intervals cut to the window [lo, hi) (ones outside become empty)."""
    s, e = _as_pair(starts, ends)
    return np.clip(s, lo, hi), np.clip(e, lo, hi)


def snap(times: npt.ArrayLike, tolerance: float) -> FloatArray:
    """``times`` with values closer than ``tolerance`` to the previous distinct one (in sorted
    order) replaced by the earliest of their cluster: instants that float round-off split
    (an end and a start computed along different paths) become one."""
    t = np.asarray(times, dtype=np.float64).ravel()
    if t.size == 0:
        return t.copy()
    order = np.argsort(t, kind="stable")
    sorted_t = t[order]
    new_instant = np.concatenate([[True], np.diff(sorted_t) > tolerance])
    firsts = sorted_t[new_instant]
    out = np.empty_like(t)
    out[order] = firsts[np.cumsum(new_instant) - 1]
    return out


def overlap_each(starts: npt.ArrayLike, ends: npt.ArrayLike, union_set: Intervals) -> FloatArray:
    """For each interval [starts[i], ends[i]], how long it intersects ``union_set`` (a normalised
    set, as :func:`union` returns)."""
    s, e = _as_pair(starts, ends)
    us, ue = union_set
    if us.size == 0:
        return np.zeros(s.size)
    cumulative = np.concatenate([[0.0], np.cumsum(ue - us)])

    def covered_before(x: FloatArray) -> FloatArray:
        idx = np.searchsorted(us, x, side="right") - 1
        inside = np.clip(x - us[np.maximum(idx, 0)], 0.0, (ue - us)[np.maximum(idx, 0)])
        return np.where(idx >= 0, cumulative[np.maximum(idx, 0)] + inside, 0.0)

    return np.maximum(covered_before(e) - covered_before(s), 0.0)
