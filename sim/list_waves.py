"""The list engine's pass by waves of numpy operations, where it is exact.

The reference pass (:mod:`sim.list_engine`) and its compiled form (:mod:`sim.list_kernel`) are
event loops: one event per task, in time order. Where no transfer's rate ever changes, a pass is
a longest-path computation instead: a task starts when the last task it waits for (its
dependencies and its stream's previous ordered task) has ended, a collective's members execute
together once the last has arrived, a task ends when its work is done and the tasks it holds on
have ended. That can be computed a *wave* at a time: the graph's tasks are put in topological
levels once (a collective's members form one unit), and each level's starts and ends are a few
numpy gathers and segment maxima over the level's rows, with the same floating-point
operations as the reference pass (``start = max(ends)``, ``end = start + duration``), so times
agree bit for bit.

Exact (:func:`wave_times` returns None otherwise and the caller runs the event pass):

- no single hardware queue per GPU (``graph.single_queue``: issue order is event order);
- the members of every collective have one duration and one fabric flag (the reference pass
  executes the last arriver's cost: with equal costs it does not matter which arrived last);
- no transfer across nodes shares a network channel, at any moment, with a transfer of another
  stream (the reference pass would slow both: processor sharing), checked on the computed times;
- no dependency cycle (the reference pass raises a deadlock).

Cost: a few numpy calls per level, so a graph with few, wide levels (every rank of ``--full``)
suits it and a long chain (a pipeline's micro-batches one after another) does not;
``bench/evaluator_compare.py`` measures it against the reference pass and the compiled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.task_columns import NO_GROUP, Csr
from core.taskgraph import TaskGraph
from sim.fluid import EPS, RELATIVE_RESOLUTION
from sim.list_program import Program, ptr_of

__all__ = ["Waves", "compile_waves", "wave_times"]


@dataclass(frozen=True)
class Waves:
    """A graph's levels, independent of prices. Units are tasks, a collective's members being one
    unit; ``unit_of[i]`` is task i's unit. Per level ``k``: its units
    ``units[unit_ptr[k]:unit_ptr[k + 1]]``, its member tasks (grouped by unit)
    ``tasks[task_ptr[k]:task_ptr[k + 1]]`` with ``member_start`` the offset of each unit's first
    member within that slice, and each member's predecessors (``pred``, rows in member order, a
    sentinel index n = the number of tasks, whose end is 0, first in every row so no row is empty)."""

    unit_of: np.ndarray
    unit_ptr: np.ndarray
    task_ptr: np.ndarray
    tasks: np.ndarray
    member_start: np.ndarray
    pred: Csr
    held: Csr  # per task, the tasks it holds on (its end waits for theirs)
    holders: Csr  # per task, the tasks holding on it
    levels: int


def _units(program: Program) -> np.ndarray:
    """Per task its unit: a collective's members share one, every other task has its own."""
    n = len(program)
    has_group = program.group != NO_GROUP
    unit = np.arange(n, dtype=np.int64)
    first_member = np.full(int(program.group_size.size), -1, np.int64)
    members = np.flatnonzero(has_group)
    codes = program.group[members]
    _, first = np.unique(codes, return_index=True)
    first_member[codes[first]] = members[first]
    unit[members] = first_member[codes]
    return unit


def compile_waves(program: Program) -> Waves | None:
    """The levels of ``program`` (None: a dependency cycle, which the reference pass reports,
    or a task that holds on others and is itself held on, which the waves do not order)."""
    unit = _units(program)
    n = unit.size
    holder, held = program.holders.index, program.holders.rows()  # holder waits for held's end
    if np.isin(holder, held).any():
        return None
    # a task's successors start after its end; a holder's successors also after the held task's
    succ_rows = program.succ.rows()
    hold_succ = _ranges(program.succ.ptr[holder], program.succ.ptr[holder + 1])
    hold_src = np.repeat(held, program.succ.ptr[holder + 1] - program.succ.ptr[holder])
    src = unit[np.concatenate([succ_rows, hold_src])]
    dst = unit[np.concatenate([program.succ.index, program.succ.index[hold_succ]])]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    is_unit = unit == np.arange(n)
    indegree = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    out_ptr = ptr_of(src, n)
    out_idx = dst[order]
    level = np.full(n, -1, np.int64)
    frontier = np.flatnonzero(is_unit & (indegree == 0))
    k = 0
    while frontier.size:
        level[frontier] = k
        nxt = out_idx[_ranges(out_ptr[frontier], out_ptr[frontier + 1])]
        np.subtract.at(indegree, nxt, 1)
        nxt = np.unique(nxt)
        frontier = nxt[indegree[nxt] == 0]
        k += 1
    if (level[is_unit] < 0).any():
        return None
    return _layout(program, unit, level[unit], k)


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[j], hi[j])`` over j."""
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return starts + np.arange(total)


def _layout(program: Program, unit: np.ndarray, task_level: np.ndarray, levels: int) -> Waves:
    """Tasks ordered by (level, unit, id) and each member's predecessor rows in that order."""
    n = unit.size
    tasks = np.lexsort((np.arange(n), unit, task_level))
    task_ptr = np.searchsorted(task_level[tasks], np.arange(levels + 1))
    sorted_units = unit[tasks]
    new_unit = np.concatenate([[True], sorted_units[1:] != sorted_units[:-1]])
    first_of_unit = np.flatnonzero(new_unit)
    unit_level = task_level[tasks[first_of_unit]]
    unit_ptr = np.searchsorted(unit_level, np.arange(levels + 1))
    member_start = first_of_unit - np.repeat(task_ptr[:-1], np.diff(unit_ptr))
    # predecessors of every task: the tasks whose successor it is (succ is the inverse relation)
    pred_of = program.succ.rows()
    by_dst = np.argsort(program.succ.index, kind="stable")
    pred_lists = Csr(ptr_of(program.succ.index, n), pred_of[by_dst])
    lengths = pred_lists.lengths[tasks] + 1  # + the sentinel
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    index = np.full(int(ptr[-1]), n, np.int64)
    body = np.ones(int(ptr[-1]), bool)
    body[ptr[:-1]] = False
    index[body] = pred_lists.index[_ranges(pred_lists.ptr[tasks], pred_lists.ptr[tasks + 1])]
    held_of = program.holders.rows()
    by_holder = np.argsort(program.holders.index, kind="stable")
    held = Csr(ptr_of(program.holders.index, n), held_of[by_holder])
    return Waves(unit_of=unit, unit_ptr=unit_ptr, task_ptr=task_ptr, tasks=tasks, member_start=member_start,
                 pred=Csr(ptr, index), held=held, holders=program.holders, levels=levels)


def wave_times(graph: TaskGraph, program: Program, waves: Waves | None, durations: np.ndarray,
               crosses: np.ndarray, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and end (seconds) of every task, as the reference pass gives them, or None where
    the waves are not exact (see the module doc)."""
    dur = np.asarray(durations, np.float64)
    cross = np.asarray(crosses, np.bool_)
    if graph.single_queue or waves is None or not _uniform_collectives(waves.unit_of, dur, cross, program.lane):
        return None
    start, end, exec_start, exec_end = _run(waves, dur, cross)
    if cross.any() and _channels_shared(program, waves.unit_of, exec_start, exec_end, cross, gpus_per_node):
        return None
    return start, end


def _uniform_collectives(unit: np.ndarray, dur: np.ndarray, cross: np.ndarray, lane: np.ndarray) -> bool:
    """Do a collective's members all have their unit's duration, fabric flag and stream?"""
    return bool((dur == dur[unit]).all() and (cross == cross[unit]).all() and (lane == lane[unit]).all())


def _run(w: Waves, dur: np.ndarray, cross: np.ndarray) -> tuple[np.ndarray, ...]:
    """Arrival, end, and the unit's execution start and end of every task, level by level."""
    n = w.unit_of.size
    end = np.zeros(n + 1)  # the sentinel n ends at 0
    done = np.zeros(n, bool)
    start = np.full(n, np.nan)
    exec_start = np.full(n, np.nan)
    exec_end = np.full(n, np.nan)
    holding, held_on = w.held.lengths > 0, w.holders.lengths > 0
    pred_ptr, pred_idx = w.pred.ptr, w.pred.index
    for k in range(w.levels):
        lo, hi = w.task_ptr[k], w.task_ptr[k + 1]
        ids = w.tasks[lo:hi]
        rows = pred_ptr[lo:hi + 1]
        arrival = np.maximum.reduceat(end[pred_idx[rows[0]:rows[-1]]], rows[:-1] - rows[0])
        start[ids] = arrival
        first = w.member_start[w.unit_ptr[k]:w.unit_ptr[k + 1]]
        begin = np.repeat(np.maximum.reduceat(arrival, first), np.diff(np.append(first, ids.size)))
        d = dur[ids]
        instant = cross[ids] & ((d <= EPS) | (d <= RELATIVE_RESOLUTION * np.abs(begin)))
        finish = np.where(instant, begin, begin + d)
        exec_start[ids], exec_end[ids] = begin, finish
        end[ids] = finish
        done[ids] = True
        _wait_for_held(end, done, w.held, ids[holding[ids]], waiter_is_row=True)  # held tasks ended before
        _wait_for_held(end, done, w.holders, ids[held_on[ids]], waiter_is_row=False)  # held tasks ending now
    return start, end[:n], exec_start, exec_end


def _wait_for_held(end: np.ndarray, done: np.ndarray, rows: Csr, owners: np.ndarray, *, waiter_is_row: bool) -> None:
    """Raise holders' ends to the ends of the tasks they hold on, for the rows of ``owners``
    whose other side has a time already: a holder's held tasks (``waiter_is_row``), or a held
    task's holders (the holder's end was set at an earlier level)."""
    if not owners.size:
        return
    other = rows.index[_ranges(rows.ptr[owners], rows.ptr[owners + 1])]
    owner = np.repeat(owners, rows.ptr[owners + 1] - rows.ptr[owners])
    ready = done[other]
    waiter, waited = (owner, other) if waiter_is_row else (other, owner)
    np.maximum.at(end, waiter[ready], end[waited[ready]])


def _channels_shared(program: Program, unit: np.ndarray, exec_start: np.ndarray, exec_end: np.ndarray,
                     cross: np.ndarray, gpus_per_node: int) -> bool:
    """Does a transfer across nodes run, at some moment, on a channel beside a transfer of
    another stream (strictly inside its span; touching ends change no rate)?"""
    member = np.flatnonzero(cross)
    channel = program.rank[member] // gpus_per_node
    pairs = np.unique(np.stack([unit[member], channel]), axis=1)  # (executing unit, channel)
    u, ch = pairs
    lane = program.lane[u]
    s, e = exec_start[u], exec_end[u]
    for c in np.unique(ch):
        on = ch == c
        if np.unique(lane[on]).size < 2:
            continue
        if _cross_stream_overlap(s[on], e[on], lane[on]):
            return True
    return False


def _cross_stream_overlap(s: np.ndarray, e: np.ndarray, lane: np.ndarray) -> bool:
    """Do intervals [s, e) of different lanes intersect (any start strictly before the latest
    end of the other lanes' earlier intervals)? Same-lane intervals are merged first."""
    seg_s, seg_e = [], []
    for code in np.unique(lane):
        mine = lane == code
        order = np.argsort(s[mine], kind="stable")
        a, b = s[mine][order], e[mine][order]
        reach = np.maximum.accumulate(b)
        new = np.concatenate([[True], a[1:] > reach[:-1]])
        first = np.flatnonzero(new)
        seg_s.append(a[first])
        seg_e.append(np.maximum.reduceat(b, first))
    a, b = np.concatenate(seg_s), np.concatenate(seg_e)
    order = np.lexsort((-(b - a), a))  # by start; a longer segment first among equal starts
    a, b = a[order], b[order]
    reach = np.maximum.accumulate(b)
    return bool((a[1:] < reach[:-1]).any())
