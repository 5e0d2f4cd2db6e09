"""A task graph's columns, made from its tasks on first use (:class:`TaskColumns`), and the
array forms they share with :mod:`core.task_arrays`: CSR lists of task ids, code tables.

What the engines, the pricing, the steady-state checks and the Timeline writer read of a
:class:`core.taskgraph.TaskGraph` is a few integers per task; :attr:`TaskGraph.columns` makes each
column once per graph (one walk over its tasks) instead of once per reader. This module imports no
other of the task graph's at run time (``TaskGraph.columns`` imports it lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from core.vocab import KINDS, Kind, Lane

if TYPE_CHECKING:
    from core.taskgraph import Op, TaskGraph

__all__ = ["KIND_CODES", "LANES", "LANE_CODES", "NO_GROUP", "SEND_CODE", "Csr", "TaskColumns", "csr_of",
           "first_seen", "row_codes"]

LANES = tuple(Lane)
NO_GROUP = -1  # a task's group code when it meets no other task
LANE_CODES = {lane: i for i, lane in enumerate(LANES)}  # a Lane -> its code (index into LANES)
KIND_CODES = {kind: i for i, kind in enumerate(KINDS)}  # a Kind -> its code (index into core.vocab.KINDS)
SEND_CODE = KIND_CODES[Kind.SEND]
_LABELS = attrgetter("rank", "step", "stage", "chunk", "microbatch", "layer", "peer", "ordered")


@dataclass(frozen=True)
class Csr:
    """Lists of task ids as compressed rows: row i is ``index[ptr[i]:ptr[i + 1]]``."""

    ptr: np.ndarray  # int64, rows + 1
    index: np.ndarray  # int64

    def row(self, i: int) -> np.ndarray:
        return self.index[self.ptr[i]:self.ptr[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.ptr)

    def rows(self) -> np.ndarray:
        """The row of every entry of ``index``."""
        return np.repeat(np.arange(self.ptr.size - 1), self.lengths)


def csr_of(rows: Sequence[Sequence[int]]) -> Csr:
    """The CSR form of a list of id lists."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    index = np.fromiter(chain.from_iterable(rows), np.int64, int(ptr[-1]))
    return Csr(ptr, index)


class _Codes:
    """Values -> codes in order of first appearance (a table column's codes)."""

    def __init__(self, first: Sequence[object] = ()) -> None:
        self.codes: dict[object, int] = {v: i for i, v in enumerate(first)}

    def __call__(self, values: Sequence[object]) -> np.ndarray:
        codes = self.codes
        for v in dict.fromkeys(values):  # the distinct values, in order of first appearance
            codes.setdefault(v, len(codes))
        return np.fromiter(map(codes.__getitem__, values), np.int64, len(values))

    @property
    def table(self) -> tuple[object, ...]:
        return tuple(self.codes)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a``, read-only: a column is shared by every reader of its graph."""
    a.flags.writeable = False
    return a


def first_seen(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``codes`` renumbered in order of first appearance, and the original code of each new one
    (a column coded against one table, recoded as a vocabulary built task by task would code it)."""
    values, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    new = np.empty(values.size, np.int64)
    new[by_first] = np.arange(values.size)
    return new[inverse.reshape(-1)], values[by_first]


def row_codes(*columns: np.ndarray) -> np.ndarray:
    """One int64 code per row of the integer ``columns`` taken side by side: equal rows get equal
    codes, distinct rows distinct ones (the ranks of the distinct rows in sorted order)."""
    n = columns[0].size
    if n == 0:
        return np.zeros(0, np.int64)
    key, span = np.zeros(n, np.int64), 1
    for col in columns:
        lo = int(col.min())
        width = int(col.max()) - lo + 1
        if span * width >= 2 ** 62:  # too wide for one integer: compare the rows themselves
            return np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        key, span = key * width + (col - lo), span * width
    return np.unique(key, return_inverse=True)[1].reshape(-1)


class TaskColumns:
    """The columns of a :class:`TaskGraph` (as :class:`TaskArrays` names them), each made on
    first use and kept: :attr:`TaskGraph.columns` is one per graph, so the engine, the pricing,
    the steady-state checks and the Timeline writer read one copy instead of each walking the
    tasks again. Columns are read-only."""

    def __init__(self, graph: TaskGraph) -> None:
        self._tasks = graph.tasks
        self._deps = graph.deps
        self._holds = graph.holds

    def __len__(self) -> int:
        return len(self._tasks)

    @cached_property
    def _labels(self) -> np.ndarray:
        n = len(self._tasks)
        return _frozen(np.fromiter(chain.from_iterable(map(_LABELS, self._tasks)), np.int64, 8 * n).reshape(n, 8).T)

    rank = property(lambda self: self._labels[0], doc="int64: the rank that runs each task")
    step = property(lambda self: self._labels[1], doc="int64: each task's step")
    stage = property(lambda self: self._labels[2], doc="int64: each task's stage (-1: none)")
    chunk = property(lambda self: self._labels[3], doc="int64: each task's chunk (-1: none)")
    microbatch = property(lambda self: self._labels[4], doc="int64: each task's micro-batch (-1: none)")
    layer = property(lambda self: self._labels[5], doc="int64: each task's layer (-1: none)")
    peer = property(lambda self: self._labels[6], doc="int64: a send's receiving rank (-1: none)")

    @cached_property
    def ordered(self) -> np.ndarray:
        """bool: the task runs in its stream's program order."""
        return _frozen(self._labels[7].astype(bool))

    @cached_property
    def lane(self) -> np.ndarray:
        """int64: codes into :data:`LANES`."""
        return _frozen(np.fromiter((LANE_CODES[t.lane] for t in self._tasks), np.int64, len(self._tasks)))

    @cached_property
    def kind(self) -> np.ndarray:
        """int64: codes into :data:`core.vocab.KINDS`."""
        return _frozen(np.fromiter((KIND_CODES[t.kind] for t in self._tasks), np.int64, len(self._tasks)))

    def _coded(self, label: str, first: Sequence[str] = ()) -> tuple[np.ndarray, tuple[str, ...]]:
        """The text label ``label`` of every task as codes into its table (``first``: entries
        the table starts with), in order of first appearance."""
        codes = _Codes(first)
        column = codes([getattr(t, label) for t in self._tasks])
        return column, tuple(map(str, codes.table))

    @cached_property
    def _name(self) -> tuple[np.ndarray, tuple[str, ...]]:
        column, table = self._coded("name")
        return _frozen(column), table

    @property
    def name(self) -> np.ndarray:
        """int64: codes into :attr:`names` (first appearance order)."""
        return self._name[0]

    @property
    def names(self) -> tuple[str, ...]:
        return self._name[1]

    @cached_property
    def _group(self) -> tuple[np.ndarray, tuple[str, ...]]:
        column, table = self._coded("group", [""])
        return _frozen(column - 1), table[1:]  # "" -> NO_GROUP

    @property
    def group(self) -> np.ndarray:
        """int64: codes into :attr:`groups` (:data:`NO_GROUP`: none; first appearance order)."""
        return self._group[0]

    @property
    def groups(self) -> tuple[str, ...]:
        return self._group[1]

    @cached_property
    def _stream(self) -> tuple[np.ndarray, tuple[str, ...]]:
        column, table = self._coded("stream", [""])
        return _frozen(column), table

    @property
    def stream(self) -> np.ndarray:
        """int64: codes into :attr:`streams` (0: ``""``, the task's lane)."""
        return self._stream[0]

    @property
    def streams(self) -> tuple[str, ...]:
        return self._stream[1]

    @cached_property
    def _work(self) -> tuple[np.ndarray, tuple[tuple[Op, ...], ...]]:
        works: dict[int, int] = {}
        unique: list[tuple[Op, ...]] = []
        for t in self._tasks:
            if id(t.ops) not in works:
                works[id(t.ops)] = len(unique)
                unique.append(t.ops)
        column = np.fromiter((works[id(t.ops)] for t in self._tasks), np.int64, len(self._tasks))
        return _frozen(column), tuple(unique)

    @property
    def work(self) -> np.ndarray:
        """int64: each task's ops, a code into :attr:`works` (ops tuples that are one object share one)."""
        return self._work[0]

    @property
    def works(self) -> tuple[tuple[Op, ...], ...]:
        return self._work[1]

    @cached_property
    def deps(self) -> Csr:
        """Per task, the tasks it waits for (in the graph's order)."""
        csr = csr_of(self._deps)
        return Csr(_frozen(csr.ptr), _frozen(csr.index))

    @cached_property
    def _hold_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(i, u) for i, hs in self._holds.items() for u in hs]
        return (_frozen(np.fromiter((i for i, _ in pairs), np.int64, len(pairs))),
                _frozen(np.fromiter((u for _, u in pairs), np.int64, len(pairs))))

    @property
    def hold_task(self) -> np.ndarray:
        """int64: task ``hold_task[j]`` may not end before ``hold_until[j]`` (the graph's holds in order)."""
        return self._hold_pairs[0]

    @property
    def hold_until(self) -> np.ndarray:
        return self._hold_pairs[1]
