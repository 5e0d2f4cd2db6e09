"""What a list-engine pass reads of a task graph, as arrays (independent of prices).

Per task: its successors (the tasks that depend on it, then the next ordered task of its stream),
how many predecessors it waits for, the tasks holding on it and how many it holds on, its
collective group and the group's size, its rank and lane. :mod:`sim.list_kernel` and
run passes over it; :mod:`sim.list_engine` keeps the reference pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.task_arrays import TaskArrays
from core.task_columns import NO_GROUP, Csr, TaskColumns


@dataclass(frozen=True)
class Program:
    """A graph's pass structure (see module doc); ``order[i]`` is the id of task i in the
    graph it was compiled from (the identity)."""

    succ: Csr
    pending: np.ndarray  # int64
    holders: Csr
    holds: np.ndarray  # int64: how many tasks each task holds on
    group: np.ndarray  # int64, NO_GROUP = none
    group_size: np.ndarray  # int64 per group code
    rank: np.ndarray
    lane: np.ndarray

    def __len__(self) -> int:
        return int(self.pending.size)


def stream_chains(stream_key: np.ndarray, ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(previous, next) pairs of consecutive ordered tasks of each stream (``stream_key``: one
    code per (rank, stream) pair, a task's stream being its own, else its lane; program order =
    id order)."""
    ids = np.flatnonzero(ordered)
    order = np.argsort(stream_key[ids], kind="stable")
    ids = ids[order]
    keys = stream_key[ids]
    same = keys[1:] == keys[:-1]
    return ids[:-1][same], ids[1:][same]


def compile_program(g: TaskArrays | TaskColumns) -> Program:
    """The pass structure of ``g`` (see :func:`pass_structure`)."""
    lanes = len(g.streams) + 64  # stream codes above the lane codes: distinct keys per (rank, stream)
    stream_key = g.rank * lanes + np.where(g.stream > 0, g.stream + 64, g.lane)
    return pass_structure(deps=g.deps, ordered=g.ordered, stream_key=stream_key, hold_task=g.hold_task,
                          hold_until=g.hold_until, group=g.group, n_groups=len(g.groups), rank=g.rank, lane=g.lane)


def pass_structure(*, deps: Csr, ordered: np.ndarray, stream_key: np.ndarray, hold_task: np.ndarray,
                   hold_until: np.ndarray, group: np.ndarray, n_groups: int, rank: np.ndarray,
                   lane: np.ndarray) -> Program:
    """The pass structure of a graph given as columns: a task's successors are its dependants in
    id order, then its stream's next ordered task (as :func:`sim.list_engine.compile_graph`
    lists them); a task's holders in the order of the holds."""
    n = int(ordered.size)
    dep_of = deps.rows()
    prev, nxt = stream_chains(stream_key, ordered)
    src = np.concatenate([deps.index, prev])
    dst = np.concatenate([dep_of, nxt])
    rank_in = np.concatenate([np.zeros(dep_of.size, np.int64), np.ones(prev.size, np.int64)])
    order = np.lexsort((dst, rank_in, src))
    succ = Csr(ptr_of(src, n), dst[order])
    pending = np.bincount(dst, minlength=n).astype(np.int64)
    horder = np.argsort(hold_until, kind="stable")
    holders = Csr(ptr_of(hold_until, n), hold_task[horder])
    members = group[group != NO_GROUP]
    return Program(succ=succ, pending=pending, holders=holders, holds=np.bincount(hold_task, minlength=n).astype(np.int64),
                   group=group, group_size=np.bincount(members, minlength=n_groups).astype(np.int64),
                   rank=rank, lane=lane)


def ptr_of(owner: np.ndarray, n: int) -> np.ndarray:
    """CSR row pointers of ``n`` rows whose entries, sorted by row, belong to rows ``owner``."""
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr
