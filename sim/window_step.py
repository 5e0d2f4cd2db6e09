"""Figures of a step extended by many copies of its period, from the steps extended by one and two.

:mod:`sim.steady_state` extends a simulated step by K copies of its period (P seconds). The step
with K + 1 copies is the one with K copies and one more period of the verified steady run put in
after the first copy: what runs before it stays, what runs after it moves P later. So every
figure that adds up time or spans is affine in K — a rank's step window, its compute,
communication, overlap and idle seconds (measures of unions of its spans), the number of spans,
the FLOPs of the compute spans — and every peak (activations, HBM by category, activations held on
the host) is the same for any K >= 2: first reached before the tasks after the copies start, it
is reached at the same instant in the K-copy step (what runs before is the same, and the copies
in between repeat the levels of the first two); first reached after every other task has ended,
it moves with the tasks after the copies, P per copy. The sums of the K-copy step are those of the
Timelines of the 1- and 2-copy steps, extrapolated; its peaks are the 2-copy step's, carried (a
peak first reached between those two parts is decided by the 1-copy step's: the same at both,
first reached at the same instant or one period later). The K-copy Timeline is written only when
a feature reads its spans (a report, a trace, a comparison with a measured run).

Used where it saves work (the two short Timelines hold at most :data:`WORTH` of the full one's
micro-batches) and checked where it runs, else the full Timeline is written: each rank's window
grows by P from one copy to two, no sum grows by more than the window, host-held activations peak
alike at one and two copies. The one-instant tolerance of the memory curves is the full step's, as
on its Timeline. Round-off: the sums agree with the full Timeline's to ~1e-12 of the step.
``tests/sim/test_window_step.py`` compares every figure with the full Timeline's (the steady-state
cases and a seeded sample of random plans).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.timeline_meta import TimelineMeta
from sim.memory import MemoryBreakdown, MemoryModel
from sim.memory_pools import has_side_stream_pools
from sim.memory_timeline import MemoryPeak, memory_timelines, rank_extents
from sim.metrics import StepMetrics, compute_flops, metrics_from_rows, rank_step_rows
from sim.steady_state import SHIFT_TOLERANCE, Replication, SteadyRun
from sim.timeline import Timeline
from sim.timeline_writer import TimelineSource

WORTH = 0.8  # the 1- and 2-copy steps' micro-batches together, as a share of the full step's
# (0.5 until 2026-11-29: at 0.8 the 1T PP64 step, 2 x 193 of 512, takes 1.83 -> 1.62 s and GPT-3 18B
# TP8 PP1 DP32 12.3 -> 9.8 ms, docs/speed.md; the figures agree with the full Timeline's either way)
SUMS = ("step_time_s", "compute_s", "comm_s", "overlap_s", "idle_s")  # a rank row's affine figures
PEAK_TOLERANCE = 1e-12  # relative: two peaks "are the same" within this


@dataclass(frozen=True)
class WindowFigures:
    """What the step's summaries read, made without its Timeline (see the module docstring)."""

    metrics: StepMetrics
    memory: dict[int, MemoryBreakdown]
    memory_peaks: dict[int, MemoryPeak]
    host_activation_peak: dict[int, float]
    spans: int
    compute_flops: float  # FLOPs of the compute spans (per step: one step is simulated)
    ranks: list[int]
    meta: TimelineMeta


def window_figures(steady: SteadyRun, source: TimelineSource, meta: TimelineMeta,
                   memory: MemoryModel) -> WindowFigures | None:
    """The extended step's figures from its 1- and 2-copy Timelines, or None where that saves no
    work or a check fails (the caller writes the full Timeline)."""
    ext = steady.extension
    copies = ext.copies
    if (not steady.uniform or copies < 3 or has_side_stream_pools(memory.plan)
            or 2 * ext.simulated_microbatches + 3 * ext.period_microbatches > WORTH * ext.microbatches):
        return None
    reps = [steady.with_copies(k) for k in (1, 2)]
    one, two = (source.write(steady.start, steady.end, meta, rep) for rep in reps)
    period = ext.period_s
    tol = SHIFT_TOLERANCE * two.span_s
    rows = _extended_rows(rank_step_rows(one), rank_step_rows(two), copies, period, tol)
    if rows is None:
        return None
    extend = _extender(copies)
    span_s = extend(one.span_s, two.span_s)
    spans_one, spans_two = _rank_spans(one), _rank_spans(two)
    if spans_one.keys() != spans_two.keys():
        return None
    rank_spans = {r: extend(spans_one[r], spans_two[r]) for r in spans_two}
    curves = memory.activation_curves(two, span_s=span_s)
    hbm = {r: mt.peak() for r, mt in memory_timelines(memory, two, curves, rank_spans).items()}
    assert reps[1] is not None  # a uniform extension
    peaks = _carried_peaks(hbm, _parts(steady, reps[1]), copies, period)
    if peaks is None:  # a peak first reached where the copies and the tasks after them overlap
        curves_one = memory.activation_curves(one, span_s=span_s)
        if not all(_same(curves_one[r].peak, curves[r].peak) for r in curves):
            return None
        hbm_one = {r: mt.peak() for r, mt in memory_timelines(memory, one, curves_one, rank_spans).items()}
        peaks = _extended_peaks(hbm_one, hbm, copies, period, tol)
    host = [memory.offloaded_activation_peak(tl, span_s) for tl in (one, two)]
    if peaks is None or host[0].keys() != host[1].keys() or not all(_same(host[0][r], v) for r, v in host[1].items()):
        return None
    rank_pp = meta.rank_pp
    return WindowFigures(
        metrics=metrics_from_rows(rows),
        memory={r: memory.breakdown(rank_pp[r], c.peak) for r, c in curves.items()},
        memory_peaks=peaks, host_activation_peak=host[1],
        spans=int(extend(len(one), len(two))), compute_flops=extend(compute_flops(one), compute_flops(two)),
        ranks=two.ranks, meta=two.meta)


def _extender(copies: int) -> Callable[[float, float], float]:
    """The K-copy value of a figure from its 1- and 2-copy values (affine in the copies)."""
    return lambda one, two: one + (copies - 1) * (two - one)


def _extended_rows(one: list[dict[str, float | int]], two: list[dict[str, float | int]], copies: int,
                   period: float, tol: float) -> list[dict[str, float | int]] | None:
    """The K-copy step's (rank, step) rows (:func:`sim.metrics.rank_step_rows`), or None unless
    every window grows by the period and no sum by more."""
    if [(r["rank"], r["step"]) for r in one] != [(r["rank"], r["step"]) for r in two]:
        return None
    extend = _extender(copies)
    out = []
    for a, b in zip(one, two, strict=True):
        grows = {k: float(b[k]) - float(a[k]) for k in SUMS}
        if abs(grows["step_time_s"] - period) > tol or any(not -tol <= g <= period + tol for g in grows.values()):
            return None
        row = dict(b)
        for k in SUMS:
            row[k] = extend(float(a[k]), float(b[k]))
        row["exposed_comm_s"] = float(row["comm_s"]) - float(row["overlap_s"])  # as sim.metrics makes it
        out.append(row)
    return out


@dataclass(frozen=True)
class _Parts:
    """Where the 2-copy step's parts lie (seconds): the tasks after the copies start at
    ``after_start``; every other task (before the window, the window, its copies) has ended by
    ``others_end``."""

    after_start: float
    others_end: float


def _parts(steady: SteadyRun, rep: Replication) -> _Parts:
    """The 2-copy step's :class:`_Parts` (``rep``: its tasks; those after the copies are the
    simulated ones moved two periods, :func:`sim.steady_state.replicate`)."""
    n = len(steady.graph.tasks)
    start = steady.start[rep.task] + rep.shift_s
    end = steady.end[rep.task] + rep.end_shift
    after = np.zeros(rep.task.size, bool)
    after[:n] = rep.shift_s[:n] > 0
    return _Parts(after_start=float(np.nanmin(start[after])) if after.any() else float("inf"),
                  others_end=float(np.nanmax(end[~after])))


def _carried_peaks(two: dict[int, MemoryPeak], parts: _Parts, copies: int,
                   period: float) -> dict[int, MemoryPeak] | None:
    """Each rank's HBM peak in the K-copy step from the 2-copy step's: first reached before the
    tasks after the copies start, it is reached then in the K-copy step too (what runs before is
    the same, and the copies in between repeat the levels of the first two); first reached after
    every other task has ended, it moves with those tasks, K - 2 periods later. None if a peak
    is first reached between (the 1-copy step decides, :func:`_extended_peaks`)."""
    out = {}
    for rank, p in two.items():
        if p.time_s < parts.after_start:
            out[rank] = p
        elif p.time_s > parts.others_end:
            out[rank] = _moved(p, copies, period)
        else:
            return None
    return out


def _extended_peaks(one: dict[int, MemoryPeak], two: dict[int, MemoryPeak], copies: int, period: float,
                    tol: float) -> dict[int, MemoryPeak] | None:
    """Each rank's HBM peak in the K-copy step from its peaks at one and two copies, or None
    unless they are the same, first reached at the same instant or one period later."""
    if one.keys() != two.keys():
        return None
    out = {}
    for rank, b in two.items():
        a = one[rank]
        if not _same(a.bytes, b.bytes) or not all(_same(a.at_peak[c], v) for c, v in b.at_peak.items()):
            return None
        if a.time_s == b.time_s:
            out[rank] = b
        elif abs(b.time_s - a.time_s - period) <= tol:
            out[rank] = _moved(b, copies, period)
        else:
            return None
    return out


def _moved(peak: MemoryPeak, copies: int, period: float) -> MemoryPeak:
    """The 2-copy step's ``peak`` in the K-copy step, first reached after its copies: K - 2 periods later."""
    return dataclasses.replace(peak, time_s=peak.time_s + (copies - 2) * period)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= PEAK_TOLERANCE * max(abs(a), abs(b), 1.0)


def _rank_spans(tl: Timeline) -> dict[int, float]:
    """Per rank, seconds from its first span's start to its last one's end."""
    ranks, lows, highs = rank_extents(tl)
    return {r: float(h - lo) for r, lo, h in zip(ranks, lows, highs, strict=True)}

