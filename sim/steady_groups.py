"""Steady state per group of ranks: a step whose independent pipelines repeat at different periods.

The data-parallel replicas of a ``--full`` step do not wait for each other until the step's end,
and those whose pipelines cross the fabric differently repeat at slightly different periods (GPT-3
175B on 1,024 A100s: 4 of 16 replicas ~2 µs per micro-batch faster), so no one period shows
(:func:`sim.steady_state.rates_differ`). Here the ranks are split into groups that share no
micro-batch task's dependency, collective or node (:func:`rank_groups`); each group's period is
verified on the shorter step as :mod:`sim.steady_state` verifies one period, the window (the run's
last period, common to every group) is repeated with each group's own period, and the tasks after
it are timed again by the list engine (:func:`retimed`): the step-end collectives that join the
groups start when their last member arrives, which no shift gives. The re-timed part starts from
the window's last copy (its times as the release of each task, verified to come out unchanged).
Anything this cannot carry over (one hardware queue per GPU, a hold or collective across the
boundary, a dependency on a micro-batch outside the verified run) returns None: the full step is
simulated. ``tests/sim/test_steady_groups.py`` checks the result against ``--exact``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from core.task_columns import NO_GROUP, row_codes
from core.taskgraph import Task, TaskGraph
from sim.costing import CostedTask
from sim.list_engine import GraphPasses
from sim.steady_state import (
    MIN_COPIES,
    SHIFT_TOLERANCE,
    Extension,
    PerGroup,
    Replication,
    microbatch_labels,
    signatures,
    steady_runs,
    tasks_by_microbatch,
)

WINDOW_TRIES = 4  # windows tried per shorter step, from its verified runs' last period back


@dataclass(frozen=True)
class GroupExtension:
    """A shorter step's window repeated per group of ranks: ``group[i]`` is task i's group,
    ``period_s[g]`` group g's period (seconds), ``run_start[g]`` the first micro-batch of its
    verified run; ``extension.period_s`` is the longest period."""

    extension: Extension
    group: np.ndarray
    period_s: np.ndarray
    run_start: np.ndarray
    run_end: int  # micro-batches below run_end + the period are copies of the run's first ones (every group)


def rank_groups(graph: TaskGraph, gpus_per_node: int, before: int) -> np.ndarray:
    """Per task, the group of ranks it belongs to: ranks joined by a dependency or a collective
    between tasks of micro-batches below ``before``, or by a node (its network channel is
    shared), are one group (what joins them later, such as the gradient reduction of the last
    micro-batch, is timed again). Groups are numbered by their union-find roots, sorted."""
    parent: dict[int, int] = {}

    def find(r: int) -> int:
        while parent.setdefault(r, r) != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for a, b in _unions(graph, gpus_per_node, before):
        parent[find(a)] = find(b)
    roots = {r: find(r) for r in parent}
    codes = {root: n for n, root in enumerate(sorted(set(roots.values())))}
    ranks, of_task = np.unique(graph.columns.rank, return_inverse=True)
    return np.array([codes[roots[r]] for r in ranks.tolist()], np.int64)[of_task.reshape(-1)]


def _unions(graph: TaskGraph, gpus_per_node: int, before: int) -> list[tuple[int, int]]:
    """The (rank, rank) unions of :func:`rank_groups`, in the order of a walk over the tasks (each
    task: its rank with its node's first rank, then with the rank of each dependency of a
    micro-batch below ``before`` on another rank, in the task's order, then with the first rank
    of its collective), each pair at its first appearance only: a pair seen before joins ranks
    already joined, so the union-find's roots are those of the whole walk."""
    c = graph.columns
    rank, n = c.rank, len(c)
    inside = (c.microbatch >= 0) & (c.microbatch < before)
    owner, dep = c.deps.rows(), c.deps.index
    joined = inside[owner] & inside[dep] & (rank[dep] != rank[owner])
    place = np.arange(dep.size) - c.deps.ptr[owner]  # a dependency's place in its task's list
    grouped = np.flatnonzero(inside & (c.group != NO_GROUP))
    codes, first = np.unique(c.group[grouped], return_index=True)
    first_rank = np.zeros(len(c.groups), np.int64)
    first_rank[codes] = rank[grouped[first]]  # a collective's first member, in task order
    last = int(place.max(initial=0)) + 2  # after every dependency of a task
    task = np.concatenate([np.arange(n), owner[joined], grouped])
    turn = np.concatenate([np.zeros(n, np.int64), 1 + place[joined], np.full(grouped.size, last)])
    a = np.concatenate([rank, rank[owner[joined]], rank[grouped]])
    b = np.concatenate([rank // gpus_per_node * gpus_per_node, rank[dep[joined]], first_rank[c.group[grouped]]])
    order = np.lexsort((turn, task))
    a, b = a[order], b[order]
    if not a.size:
        return []
    seen = np.sort(np.unique(row_codes(a, b), return_index=True)[1])
    return list(zip(a[seen].tolist(), b[seen].tolist(), strict=True))


def find_group_extension(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, full: int,
                         pp: int, gpus_per_node: int) -> GroupExtension | None:
    """The first of :func:`group_extensions` (None if there is none)."""
    return next(group_extensions(graph, start, end, simulated, full, pp, gpus_per_node), None)


def group_extensions(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, full: int,
                     pp: int, gpus_per_node: int) -> Iterator[GroupExtension]:
    """The extensions of a shorter step whose groups of ranks (:func:`rank_groups`, two or more)
    each repeat at a period of their own: the window the last period common to the groups'
    verified runs, then up to :data:`WINDOW_TRIES` - 1 earlier ones (a task before the window
    may hold on one a few micro-batches after it, which must lie in the verified run). None if
    some group shows no period or they share no window."""
    before = simulated - pp  # the cool-down's micro-batches may join the groups (timed again)
    group = rank_groups(graph, gpus_per_node, before)
    groups = int(group.max()) + 1 if group.size else 0
    if groups < 2:
        return
    by_mb = tasks_by_microbatch(graph, simulated)
    signature = signatures(graph)
    tol = SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start))
    for period in sorted({1, pp}):
        if (full - simulated) % period or (full - simulated) // period < MIN_COPIES:
            continue
        runs = [steady_runs([ids[group[ids] == g] for ids in by_mb], signature, start, end, period, tol)
                for g in range(groups)]
        if any(r is None for r in runs):
            continue
        first = np.array([r[0] for r in runs if r is not None])
        periods = np.array([r[2] for r in runs if r is not None])
        run_end = min(r[1] for r in runs if r is not None)
        last = min(run_end, before)
        lowest = max(int(first.max()) + max(period, pp), last - period - WINDOW_TRIES + 1)
        for window in range(last - period, lowest - 1, -1):  # the latest first: the fewest tasks to time again
            if _loose_outside(graph, start, end, by_mb, group, window, period):
                ext = Extension(simulated_microbatches=simulated, microbatches=full, period_microbatches=period,
                                period_s=float(periods.max()), window_start=window)
                yield GroupExtension(ext, group, periods, first, run_end)


def _loose_outside(graph: TaskGraph, start: np.ndarray, end: np.ndarray, by_mb: list[np.ndarray],
                   group: np.ndarray, window: int, period: int) -> bool:
    """No task without a micro-batch runs while its group's window does."""
    ids = np.concatenate(by_mb[window:window + period])
    n = int(group.max()) + 1
    lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(lo, group[ids], start[ids])
    np.maximum.at(hi, group[ids], end[ids])
    loose = microbatch_labels(graph) < 0
    return not bool((loose & (end > lo[group]) & (start < hi[group])).any())


@dataclass(frozen=True)
class _Split:
    """The shorter step's tasks: ``window`` (repeated), ``after`` (timed again); ``shift`` per
    task, seconds from the shorter step to the full one's last window copy (0 before the window)."""

    window: np.ndarray
    after: np.ndarray
    shift: np.ndarray


def _split(graph: TaskGraph, start: np.ndarray, g: GroupExtension) -> _Split:
    mb = microbatch_labels(graph)
    ext = g.extension
    w0, w1 = ext.window_start, ext.window_start + ext.period_microbatches
    window = (mb >= w0) & (mb < w1)
    lo = np.full(g.period_s.size, np.inf)
    np.minimum.at(lo, g.group[window], start[window])
    after = (mb >= w1) | ((mb < 0) & (start >= lo[g.group]))
    # a micro-batch task's counterpart in the full step is c periods later; a loose one is itself
    shift = np.where(mb >= 0, ext.copies * g.period_s[g.group], 0.0)
    return _Split(window, after, shift)


def retimed(graph: TaskGraph, start: np.ndarray, end: np.ndarray, durations: np.ndarray, crosses: np.ndarray,
            gpus_per_node: int, g: GroupExtension) -> Replication | None:
    """The full step's tasks as copies of the shorter step's: before and in the window as they
    ran, the window's copies each group's period apart, and the tasks after it timed again by the
    list engine (``durations``, ``crosses``: the shorter step's last pass's, per task); None when
    the part after the window cannot be timed on its own (see the module doc)."""
    if graph.single_queue:
        return None
    s = _split(graph, start, g)
    part = np.flatnonzero(s.window | s.after)
    sub = _subgraph(graph, part, end + s.shift, g, s)
    if sub is None:
        return None
    sub_graph, release = sub
    dur = np.concatenate([durations[part], release])
    cross = np.concatenate([crosses[part], np.zeros(release.size, bool)])
    new_start, new_end = GraphPasses(sub_graph).times(dur, cross, gpus_per_node)
    new_start, new_end = new_start[:part.size], new_end[:part.size]
    tol = SHIFT_TOLERANCE * float(np.nanmax(new_end))
    in_window = s.window[part]
    expected = s.shift[part][in_window]
    if (np.abs(new_start[in_window] - start[part][in_window] - expected).max(initial=0.0) > tol
            or np.abs(new_end[in_window] - end[part][in_window] - expected).max(initial=0.0) > tol):
        return None  # the window's last copy did not come out as it ran: something outside it mattered
    held = np.searchsorted(part, _held_after(graph, s))
    if np.abs(new_end[held] - end[part][held] - s.shift[part][held]).max(initial=0.0) > tol:
        return None  # a copy of the window holds on a task whose re-timed end is no copy of its own
    return _replication(graph, start, end, g, s, part, new_start, new_end)


def _subgraph(graph: TaskGraph, part: np.ndarray, full_end: np.ndarray, g: GroupExtension,
              s: _Split) -> tuple[TaskGraph, np.ndarray] | None:
    """The tasks ``part`` as a graph of their own, each waiting for (or held until) a release task
    that ends when its predecessors (the tasks it holds on) outside ``part`` end in the full step
    (``full_end``); None if one of them is a micro-batch task outside its group's verified run, a
    collective crosses ``part`` or a hold does not carry over (:func:`_holds_carry_over`)."""
    tasks = graph.tasks
    local = np.full(len(tasks), -1, np.int64)
    local[part] = np.arange(part.size)
    mb = microbatch_labels(graph)
    if not _groups_inside(graph, local) or not _holds_carry_over(graph, local, mb, s, g):
        return None
    releases = _Releases(part.size, full_end)
    outside_preds = _outside_predecessors(graph, part, local)
    deps: list[list[int]] = []
    holds: dict[int, list[int]] = {}
    for n, i in enumerate(part.tolist()):
        preds = outside_preds.get(i, [])
        held = [h for h in graph.holds.get(i, ()) if local[h] < 0]
        if any(0 <= mb[p] < g.run_start[g.group[p]] for p in [*preds, *held]):
            return None  # its counterpart in the full step is no copy of a verified task
        deps.append([int(local[d]) for d in graph.deps[i] if local[d] >= 0] + releases.add(tasks[i], preds))
        own_holds = [int(local[h]) for h in graph.holds.get(i, ()) if local[h] >= 0] + releases.add(tasks[i], held)
        if own_holds:
            holds[n] = own_holds
    sub = TaskGraph.of([tasks[i] for i in part.tolist()] + releases.tasks, deps + [[] for _ in releases.tasks],
                       graph.meta, holds)
    return sub, np.array(releases.end)


def _holds_carry_over(graph: TaskGraph, local: np.ndarray, mb: np.ndarray, s: _Split, g: GroupExtension) -> bool:
    """Does every task before the window that holds on one after it hold on a micro-batch task of
    the verified run (the full step's copy of it ends as it did)? Holds on re-timed tasks from the
    window's copies are checked by :func:`retimed`."""
    end = g.run_end + g.extension.period_microbatches
    for i, hs in graph.holds.items():
        if local[i] < 0 and any(s.after[h] and not 0 <= mb[h] < end for h in hs):
            return False
    return True


def _held_after(graph: TaskGraph, s: _Split) -> np.ndarray:
    """Tasks after the window that a task before it, or in it, holds on (ids)."""
    return np.array(sorted({h for i, hs in graph.holds.items() if not s.after[i] for h in hs if s.after[h]}), np.int64)


class _Releases:
    """Release tasks of a part of a graph (numbered after its ``size`` tasks): each starts at 0
    and lasts until the latest full-step end (``full_end``) of the tasks it stands for."""

    def __init__(self, size: int, full_end: np.ndarray) -> None:
        self.size, self.full_end = size, full_end
        self.tasks: list[Task] = []
        self.end: list[float] = []

    def add(self, task: Task, outside: list[int]) -> list[int]:
        """A release for ``task`` standing for the tasks ``outside`` (none if empty): its id, listed."""
        if not outside:
            return []
        self.end.append(float(self.full_end[outside].max()))
        self.tasks.append(Task(task.rank, task.lane, task.kind, "release", (), microbatch=-1, ordered=False))
        return [self.size + len(self.tasks) - 1]


def _outside_predecessors(graph: TaskGraph, part: np.ndarray, local: np.ndarray) -> dict[int, list[int]]:
    """Per task of ``part``, the tasks outside it that it waits for: dependencies, and the
    previous ordered task of its stream."""
    out: dict[int, list[int]] = {}
    for i in part.tolist():
        preds = [d for d in graph.deps[i] if local[d] < 0]
        if preds:
            out[i] = preds
    for ids in graph.streams().values():
        prev = -1
        for i in ids:
            if not graph.tasks[i].ordered:
                continue
            if local[i] >= 0 and prev >= 0 and local[prev] < 0:
                out.setdefault(i, []).append(prev)
            prev = i
    return out


def _groups_inside(graph: TaskGraph, local: np.ndarray) -> bool:
    """Does every collective lie wholly inside or wholly outside the part (``local`` >= 0)?"""
    inside: dict[str, set[bool]] = {}
    for i, t in enumerate(graph.tasks):
        if t.group:
            inside.setdefault(t.group, set()).add(bool(local[i] >= 0))
    return all(len(v) == 1 for v in inside.values())


def _replication(graph: TaskGraph, start: np.ndarray, end: np.ndarray, g: GroupExtension, s: _Split,
                 part: np.ndarray, new_start: np.ndarray, new_end: np.ndarray) -> Replication:
    """Every task once (those after the window at their new times), then the window's copies."""
    ext = g.extension
    n = len(graph.tasks)
    mb = microbatch_labels(graph)
    start_shift, end_shift = np.zeros(n), np.zeros(n)
    after = s.after[part]
    moved = part[after]
    start_shift[moved] = new_start[after] - start[moved]
    end_shift[moved] = new_end[after] - end[moved]
    window = np.flatnonzero(s.window)
    k = np.repeat(np.arange(1, ext.copies + 1), window.size)
    copies = np.tile(window, ext.copies)
    copy_shift = k * g.period_s[g.group[copies]]
    mb_shift = np.concatenate([np.where(s.after & (mb >= 0), ext.copies * ext.period_microbatches, 0),
                               k * ext.period_microbatches])
    return Replication(task=np.concatenate([np.arange(n), copies]), shift_s=np.concatenate([start_shift, copy_shift]),
                       microbatch_shift=mb_shift, end_shift_s=np.concatenate([end_shift, copy_shift]))



def per_group_extension(microbatches: int, pp: int, gpus_per_node: int) -> PerGroup:
    """:func:`sim.steady_state.steady_run`'s ``per_group`` for a step of ``microbatches`` on ``pp``
    stages whose runner's payload ends with the prices of its last pass (a
    :class:`sim.costing.CostedTask` per task)."""

    def extend(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int,
               payload: object) -> tuple[Extension, Replication] | None:
        costs = cast(Sequence[CostedTask], cast(tuple[object, ...], payload)[-1])
        durations = np.fromiter((c.duration_s for c in costs), float, len(costs))
        crosses = np.fromiter((c.crosses_nodes for c in costs), bool, len(costs))
        for g in group_extensions(graph, start, end, simulated, microbatches, pp, gpus_per_node):
            rep = retimed(graph, start, end, durations, crosses, gpus_per_node, g)
            if rep is not None:
                return g.extension, rep
        return None

    return extend
