"""Steady state: simulate a step with fewer micro-batches and extend its periodic middle.

A pipeline schedule's steady phase repeats: once warm-up is over, the tasks of micro-batch
k + c (c micro-batches per period: 1 for 1F1B-like orders, pp for interleaved ones, whose
micro-batches go round the chunks in groups of pp) run exactly as those of micro-batch k, P
seconds later. A step of m micro-batches is then the step of m' < m micro-batches (same plan,
fewer micro-batches) with (m - m') / c more copies of one period inserted in the middle, and
everything after it shifted by the inserted time.

Nothing is assumed: the shorter step is simulated and the extension is used only where that
simulation *shows* the period: for a run of consecutive micro-batches k covering at least
max(c, pp), every task of micro-batch k + c matches a task of micro-batch k (same rank, lane,
kind, stage, chunk, layer and duration, in program order) starting and ending exactly P later
(to 1e-9 of the step; a send held open until the step's last compute is compared by its start
and ends behind every copy: :mod:`sim.steady_holds`); the run's first period is the one
repeated. Tasks of no micro-batch (step setup, optimizer, reductions of the micro-batch-less
kind) must lie before or after the repeated window. Otherwise the full step is simulated (and always with ``exact``).
``tests/sim/test_steady_state.py`` checks the extended step against the full simulation (every
schedule family at pp 4 and 8).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.task_columns import row_codes
from core.taskgraph import TaskGraph
from sim.steady_holds import holds_after, late_holds, period_ends

SHIFT_TOLERANCE = 1e-9  # relative to the step: two periods "repeat exactly" within this
MIN_COPIES = 2  # extend only when it saves at least this many periods
MIN_RATE_RUN = 4  # micro-batches whose constant, unequal shifts show a step running at several periods


@dataclass(frozen=True)
class Extension:
    """How a simulated step of ``simulated_microbatches`` extends to ``microbatches``: the
    micro-batches ``window_start`` .. ``window_start + period_microbatches - 1`` are repeated
    ``copies`` times, each copy ``period_s`` seconds after the previous one."""

    simulated_microbatches: int
    microbatches: int
    period_microbatches: int
    period_s: float
    window_start: int

    @property
    def copies(self) -> int:
        return (self.microbatches - self.simulated_microbatches) // self.period_microbatches

    def with_copies(self, copies: int) -> Extension:
        """The same extension to a step of ``copies`` periods more than the simulated one."""
        return dataclasses.replace(self, microbatches=self.simulated_microbatches + copies * self.period_microbatches)


@dataclass(frozen=True)
class Replication:
    """The extended step's tasks as copies of simulated ones: extended task j is simulated task
    ``task[j]`` moved ``shift_s[j]`` seconds later, its micro-batch label ``microbatch_shift[j]`` higher."""

    task: np.ndarray
    shift_s: np.ndarray
    microbatch_shift: np.ndarray
    end_shift_s: np.ndarray | None = None  # its end's shift when it differs from its start's (re-timed tasks)

    @property
    def end_shift(self) -> np.ndarray:
        """Seconds each extended task's end is moved (``shift_s`` unless re-timed)."""
        return self.shift_s if self.end_shift_s is None else self.end_shift_s

    def __len__(self) -> int:
        return int(self.task.size)


def reduced_microbatches(m: int, pp: int, vpp: int, multiple: int = 1, short_cool_down: bool = False) -> list[int]:
    """Micro-batch counts to try simulating instead of ``m`` (in order; empty: simulate all):
    room for warm-up, a verified steady run of max(1 period, pp), the period after it and
    cool-down (4 spare micro-batches for 1F1B-like orders, whose warm-up may run a few past pp;
    interleaved ones' ~2pp edges leave room), then twice that,
    each a multiple of ``multiple`` (schedules that need it), saving at least ``MIN_COPIES``
    periods and congruent to ``m`` modulo the period lengths it may show: 1 and pp, except the
    first count of a schedule without virtual stages (``vpp`` 1: 1F1B-like orders, whose period
    is one micro-batch), which need not be a multiple of pp away from ``m``.

    ``short_cool_down`` (a 1F1B-like order whose steady run reaches the cool-down, as Megatron-LM's
    1F1B does): first try 3pp micro-batches, the fewest that can show a run of pp: micro-batch k
    repeats at k + 1 from k = pp (its forward after warm-up) to k = m - pp (the first whose
    backward on stage 0 runs in the cool-down, beside no forward), so the run is m - 2pp long
    (measured: 64 of 136 and 64-128 of 192 on the 1T PP64 bench step); at least 2pp + 8, the
    count tried before, which is the larger for pp <= 8 (if its run does not show the period,
    the next count is simulated)."""
    period = pp if vpp > 1 else 1
    edge = 2 * pp if vpp > 1 else pp  # warm-up (and cool-down) in micro-batches: 1F1B fills pp, interleaved ~2pp
    first = 2 * edge + max(period, pp) + period + (4 if vpp == 1 else 0)
    out = []
    tight = max(3 * pp, 2 * pp + 8)  # warm-up pp, a run of pp, cool-down pp (or the earlier 2pp + 8)
    if short_cool_down and vpp == 1 and tight <= first - 4 and tight % multiple == 0 and tight + MIN_COPIES <= m:
        out.append(tight)
    for need, periods in ((first, period), (2 * first, pp)):
        modulus = int(np.lcm(periods, multiple))
        reduced = need + (m - need) % modulus
        if reduced + MIN_COPIES * period <= m and reduced % multiple == 0:
            out.append(reduced)
    return out


def find_extension(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, full: int,
                   pp: int, late: np.ndarray | None = None) -> Extension | None:
    """The extension of a simulated step of ``simulated`` micro-batches to ``full`` that its
    times show (None if they show no period that divides ``full - simulated``); ``late``: per
    task, the task a late hold ends it with, or -1 (:mod:`sim.steady_holds`; ``end`` is then the
    ends the checks compare, :func:`sim.steady_holds.period_ends`)."""
    by_mb = tasks_by_microbatch(graph, simulated)
    step = float(np.nanmax(end) - np.nanmin(start))
    signature = signatures(graph)
    for period in sorted({1, pp}):
        if (full - simulated) % period:
            continue
        found = steady_runs(by_mb, signature, start, end, period, SHIFT_TOLERANCE * step)
        if found is None:
            continue
        first, last, shift = found
        window = first  # the verified run's first period
        if last - first < max(period, pp) or window + period > last:
            continue
        if not _loose_tasks_outside(graph, start, end, by_mb, window, period):
            continue
        if late is not None and (late >= 0).any() and not holds_after(
                late, _after(microbatch_labels(graph), start, window, window + period)):
            continue
        return Extension(simulated_microbatches=simulated, microbatches=full, period_microbatches=period,
                         period_s=shift, window_start=window)
    return None


def rates_differ(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, pp: int) -> bool:
    """Does a shorter step of a 1F1B-like order run at several periods at once: from micro-batch pp
    to the pp-th before the last, every task of micro-batch k + 1 starts and ends a constant time
    after its match in k, and those times differ between tasks: GPipe's forwards and backwards,
    or ranks and streams that do not wait for each other, such as data-parallel replicas whose
    pipelines cross the fabric differently. Then no one period shows in a longer step either."""
    by_mb = tasks_by_microbatch(graph, simulated)
    if simulated - 2 * pp < MIN_RATE_RUN:
        return False
    signature = signatures(graph)
    tol = SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start))
    shifts: tuple[np.ndarray, np.ndarray] | None = None
    for k in range(pp, simulated - pp - 1):
        a, b = by_mb[k], by_mb[k + 1]
        if a.size != b.size or a.size == 0 or not np.array_equal(signature[a], signature[b]):
            return False
        ds, de = start[b] - start[a], end[b] - end[a]
        shifts = shifts or (ds, de)
        if np.abs(ds - shifts[0]).max() > tol or np.abs(de - shifts[1]).max() > tol:
            return False  # still settling (or no steady run at all): a longer step may show one period
    return shifts is not None and float(np.ptp(shifts[0])) > tol


def falls_behind(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, pp: int, vpp: int) -> bool:
    """Does a shorter step fall further behind every micro-batch, by uneven amounts: from the end
    of warm-up (pp micro-batches, 2pp for interleaved orders) to the start of cool-down, each
    micro-batch's extent (its first task's start to its last task's end) is longer than the
    previous one's, and the growth itself varies. A stream with a backlog does this: a ZeRO-2
    data-parallel stream whose reduce-scatters of one micro-batch take longer than its compute
    (each falls further behind it) while sharing a node's network channel with the pipeline's
    sends, which it meets at a different point of each period. Measured on GPT-3 18B's plans on
    256 A100s (issue 29): no such step repeated a period in its longer counts either (1F1B and
    ZB-H1 with ZeRO-2 on pp 8, interleaved on pp 4), while every longer count that did extend
    had grown by one constant amount per micro-batch (ZB-H1 settling) or not at all."""
    edge = pp if vpp == 1 else 2 * pp
    if simulated - 2 * edge < MIN_RATE_RUN:
        return False
    by_mb = tasks_by_microbatch(graph, simulated)[edge:simulated - edge]
    if any(ids.size == 0 for ids in by_mb):
        return False
    growth = np.diff([float(end[ids].max() - start[ids].min()) for ids in by_mb])
    tol = SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start))
    return bool((growth > tol).all() and np.ptp(growth) > tol)


def rank_paces(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, pp: int,
               vpp: int) -> tuple[float, float] | None:
    """The slowest and fastest rank's pace (seconds per micro-batch: the median step of its first
    task's start from one micro-batch to the one a period later, over the period's micro-batches
    (1; pp for interleaved orders), between warm-up and cool-down) in a shorter step, when they
    differ by more than the period tolerance; else None."""
    edge, period = (pp, 1) if vpp == 1 else (2 * pp, pp)
    by_mb = tasks_by_microbatch(graph, simulated)[edge:simulated - edge]
    if len(by_mb) < max(MIN_RATE_RUN, period + 2) or any(ids.size == 0 for ids in by_mb):
        return None
    rank = graph.columns.rank
    ranks = np.unique(rank)
    first = np.full((len(by_mb), ranks.size), np.nan)
    for k, ids in enumerate(by_mb):
        col = np.searchsorted(ranks, rank[ids])
        np.fmin.at(first[k], col, start[ids])
    paces = np.nanmedian(first[period:] - first[:-period], axis=0) / period
    tol = SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start))
    if np.isnan(paces).any() or float(np.ptp(paces)) <= tol:
        return None
    return float(paces.max()), float(paces.min())


def microbatch_labels(graph: TaskGraph) -> np.ndarray:
    """Per task, its micro-batch (-1: a task of no micro-batch; read-only)."""
    return graph.columns.microbatch


def tasks_by_microbatch(graph: TaskGraph, m: int) -> list[np.ndarray]:
    mb = microbatch_labels(graph)
    order = np.argsort(mb, kind="stable")
    bounds = np.searchsorted(mb[order], np.arange(-1, m + 1))
    return [order[bounds[k + 1]:bounds[k + 2]] for k in range(m)]  # task ids of each mb, program order


def signatures(graph: TaskGraph) -> np.ndarray:
    """Per task, an integer naming what it is apart from its micro-batch (its durations are
    compared through its times)."""
    c = graph.columns
    ops = np.fromiter(map(len, c.works), np.int64, len(c.works))[c.work]
    return row_codes(c.rank, c.lane, c.kind, c.stage, c.chunk, c.layer, ops)


def steady_runs(by_mb: list[np.ndarray], signature: np.ndarray, start: np.ndarray, end: np.ndarray,
                period: int, tol: float) -> tuple[int, int, float] | None:
    """The longest run [first, last) of micro-batches k whose tasks repeat at k + period with one
    common shift; returns (first, last, shift) or None."""
    best: tuple[int, int, float] | None = None
    first, run_shift = -1, 0.0
    for k in range(len(by_mb) - period + 1):
        shift = _shift(by_mb[k], by_mb[k + period], signature, start, end, tol) if k + period < len(by_mb) else None
        if first >= 0 and shift is not None and abs(shift - run_shift) <= tol:
            continue  # the run goes on
        if first >= 0 and (best is None or k - first > best[1] - best[0]):
            best = (first, k, run_shift)
        first, run_shift = (k, shift) if shift is not None else (-1, 0.0)
    return best


def _shift(a: np.ndarray, b: np.ndarray, signature: np.ndarray, start: np.ndarray, end: np.ndarray,
           tol: float) -> float | None:
    """The common time shift from tasks ``a`` to tasks ``b`` (same kinds of tasks in the same
    order, same durations), or None."""
    if a.size != b.size or a.size == 0 or not np.array_equal(signature[a], signature[b]):
        return None
    ds, de = start[b] - start[a], end[b] - end[a]
    shift = float(ds[0])
    if np.abs(ds - shift).max() > tol or np.abs(de - shift).max() > tol:
        return None
    return shift


def _loose_tasks_outside(graph: TaskGraph, start: np.ndarray, end: np.ndarray, by_mb: list[np.ndarray],
                         window: int, period: int) -> bool:
    """No task without a micro-batch runs while the repeated window does."""
    ids = np.concatenate(by_mb[window:window + period])
    lo, hi = float(start[ids].min()), float(end[ids].max())
    inside = (microbatch_labels(graph) < 0) & (end > lo) & (start < hi)
    return not bool(inside.any())


def replicate(graph: TaskGraph, start: np.ndarray, ext: Extension, late: np.ndarray | None = None) -> Replication:
    """The extended step's tasks: the simulated ones up to the window, the window's copies, and
    the rest (and loose tasks that start after the window) shifted behind them; a task ended by a
    late hold (``late``, :mod:`sim.steady_holds`) ends behind every copy, as what it holds on does."""
    mb = microbatch_labels(graph)
    w0, w1 = ext.window_start, ext.window_start + ext.period_microbatches
    after = _after(mb, start, w0, w1)
    window = np.flatnonzero((mb >= w0) & (mb < w1))
    copies = np.arange(1, ext.copies + 1)
    base = np.arange(mb.size)
    task = np.concatenate([base, np.tile(window, copies.size)])
    k = np.concatenate([np.where(after, ext.copies, 0), np.repeat(copies, window.size)])
    shift = k * ext.period_s
    held = None if late is None or not (late >= 0).any() else np.where(late[task] >= 0, ext.copies * ext.period_s, shift)
    if held is not None and np.array_equal(held, shift):
        held = None  # every late-held task is behind the copies already
    return Replication(task=task, shift_s=shift, microbatch_shift=np.where(mb[task] >= 0, k * ext.period_microbatches, 0),
                       end_shift_s=held)


def _after(mb: np.ndarray, start: np.ndarray, w0: int, w1: int) -> np.ndarray:
    """Per task (``mb``: its micro-batch), is it shifted behind every inserted copy of the window
    [w0, w1): a later micro-batch's, or a loose task starting after the window has begun?"""
    window_lo = float(start[(mb >= w0) & (mb < w1)].min())
    return (mb >= w1) | ((mb < 0) & (start >= window_lo))


_LABEL = re.compile(r"(?<=[FBW])(\d+)")


def has_label(name: str) -> bool:
    """Does ``name`` carry an action label with a micro-batch number?"""
    return _LABEL.search(name) is not None


def relabel(name: str, microbatch: int, new_microbatch: int) -> str:
    """``name`` with the micro-batch number of its action label (``F3``, ``B3c1``, ``act F3``,
    ``F3.host``) changed to ``new_microbatch``."""
    return _LABEL.sub(lambda m: str(new_microbatch) if int(m.group(1)) == microbatch else m.group(1), name)


@dataclass(frozen=True)
class SteadyRun:
    """A shorter step that extends to the full one: what was simulated and how it extends."""

    graph: TaskGraph
    start: np.ndarray
    end: np.ndarray
    extension: Extension
    replication: Replication
    payload: object  # what the caller's runner returned besides the graph and times
    uniform: bool = False  # one period for every task (:func:`replicate`), not per group or phase
    late: np.ndarray | None = None  # per task, what a late hold ends it with, or -1 (:mod:`sim.steady_holds`)

    def with_copies(self, copies: int) -> Replication | None:
        """The tasks of the step extended by ``copies`` periods only (None unless ``uniform``)."""
        return (replicate(self.graph, self.start, self.extension.with_copies(copies), self.late) if self.uniform
                else None)


@dataclass(frozen=True)
class NoPeriod:
    """No shorter step extends: the micro-batch counts simulated, and whether the last one ran
    at several periods at once (:func:`rates_differ`: the longer counts were not tried)."""

    tried: tuple[int, ...]
    rates_differ: bool = False
    falls_behind: bool = False  # the last one fell further behind every micro-batch, unevenly (:func:`falls_behind`)
    per_group: bool = False  # one period per group of ranks was looked for too (:mod:`sim.steady_groups`)
    paces: tuple[float, float] | None = None  # the last one's slowest and fastest rank paces, when they differ (:func:`rank_paces`)

    @property
    def reason(self) -> str:
        """One line for ``--json``'s ``simulation.steady_state.fallback``."""
        why = "; its tasks repeat at several periods at once, as a longer step's would" if self.rates_differ else ""
        if self.falls_behind:
            why = "; it falls further behind every micro-batch, by uneven amounts, as a longer step would"
        if self.paces is not None and not why:
            why = (f"; in the last, its ranks advanced at different paces, {self.paces[1]:.6g} to {self.paces[0]:.6g} s "
                   "per micro-batch")
        groups = ", nor one per group of ranks" if self.per_group else ""
        return (f"no period repeats in the shorter steps tried{groups} "
                f"({', '.join(map(str, self.tried))} micro-batches{why})")


Runner = Callable[[int], tuple[TaskGraph, np.ndarray, np.ndarray, object]]
"""Simulates the step with the given number of micro-batches: (graph, start, end, payload)."""
PerGroup = Callable[[TaskGraph, np.ndarray, np.ndarray, int, object], tuple[Extension, Replication] | None]
"""Extends a shorter step (graph, start, end, its micro-batches, the runner's payload) whose groups
of ranks repeat at periods of their own (:mod:`sim.steady_groups`), or None."""


def steady_run(run: Runner, microbatches: int, pp: int, vpp: int, multiple: int = 1,
               short_cool_down: bool = False, per_group: PerGroup | None = None,
               max_fraction: float = 1.0, by_phase: PerGroup | None = None) -> SteadyRun | NoPeriod:
    """The first shorter step (:func:`reduced_microbatches`) whose times show a period that
    extends it to ``microbatches`` (or, with ``per_group``, one period per group of ranks); else
    what was tried (simulate the full step). A 1F1B-like order's step that runs at several periods
    at once, or any step that falls further behind every micro-batch by uneven amounts
    (:func:`falls_behind`), ends the search. Counts above ``max_fraction`` of ``microbatches``
    are not tried (a shorter step that shows no period costs its count on top of the whole step).
    ``by_phase``: extends a step of 1F1B-like order whose phases repeat at periods of their own
    (:func:`sim.steady_phases.phased_extension`: GPipe's forwards, then backwards)."""
    tried: list[int] = []
    counts = reduced_microbatches(microbatches, pp, vpp, multiple, short_cool_down)
    for simulated in (n for n in counts if n <= max_fraction * microbatches):
        graph, start, end, payload = run(simulated)
        tried.append(simulated)
        late = late_holds(graph, end, simulated, pp, SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start)))
        ends = period_ends(start, end, late)
        ext = find_extension(graph, start, ends, simulated, microbatches, pp, late)
        if ext is not None:
            return SteadyRun(graph, start, end, ext, replicate(graph, start, ext, late), payload, uniform=True, late=late)
        grouped = per_group(graph, start, end, simulated, payload) if per_group is not None else None
        if grouped is not None:
            return SteadyRun(graph, start, end, grouped[0], grouped[1], payload)
        phased = by_phase(graph, start, end, simulated, payload) if by_phase is not None and vpp == 1 else None
        if phased is not None:
            return SteadyRun(graph, start, end, phased[0], phased[1], payload)
        if vpp == 1 and rates_differ(graph, start, ends, simulated, pp):
            return NoPeriod(tuple(tried), rates_differ=True, per_group=per_group is not None)
        if falls_behind(graph, start, ends, simulated, pp, vpp):
            return NoPeriod(tuple(tried), falls_behind=True, per_group=per_group is not None)
    paces = rank_paces(graph, start, end, tried[-1], pp, vpp) if tried else None
    return NoPeriod(tuple(tried), per_group=per_group is not None, paces=paces)
