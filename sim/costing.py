"""Costed tasks: a task's duration and where each of its ops falls inside it.

Each task's ops run back to back (a ``concurrent`` op runs beside the previous one), so a task's
duration and the offsets of its spans follow from its ops' durations. Pricing ops on hardware is
:mod:`sim.pricing`; fixed-duration graphs (playground, replay) are costed by :func:`cost_fixed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.taskgraph import Op, TaskGraph
from core.vocab import Lane

V = TypeVar("V")
COST_MEMO_ENTRIES = 8192
"""Entries a memo of priced tasks keeps before it starts afresh (a bound on memory: each holds a
task and its segments; a 300-plan slice of explore's 18B grid makes ~5,600 layouts)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """Where one op of a task falls, relative to the task's start (seconds)."""

    op: Op
    offset_s: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class CostedTask:
    """A task's duration and its ops' segments; ``crosses_nodes`` marks fabric traffic;
    ``dram_s``: seconds of it streaming from host memory and ``wait_s``: seconds of it waiting in
    communication (TP collectives inside a compute task), for CPU hosts whose processes share
    the cores (waiting uses no core)."""

    duration_s: float
    segments: tuple[Segment, ...]
    crosses_nodes: bool = False
    dram_s: float = 0.0
    wait_s: float = 0.0


def layout_ops(ops: Sequence[Op], durations: Sequence[float], crosses_nodes: bool = False) -> CostedTask:
    """Place ops back to back (a ``concurrent`` op beside the previous one) and total them.

    A concurrent op of ``chunks`` = n > 1 (a collective pipelined with the matmul before it, chunk
    by chunk) ends ``previous / n`` after its own duration: the two-stage pipeline of n chunks,
    one of which needs no communication (the rank's own shard), takes max(M, C + M / n) for a
    matmul of M seconds and a collective of C (the larger of the pipeline's two extreme paths:
    every matmul chunk, or every communication chunk then the last matmul chunk); when every
    chunk is communicated (``own_chunk`` False: Transformer Engine's pipelined reduce-scatter),
    the first path ends with the last chunk's communication: max(M + C / n, C + M / n). A concurrent
    op of ``beside`` = b > 1 runs so beside the previous b compute-lane ops (one fused op's b
    matmuls, run chunk by chunk: M is their sum; ops of other lanes between them run in turn).

    Concurrent ops that follow one another form a chain beside the same ops: each starts no
    earlier than the end of the chain's previous op on its own lane (one stream, or the host,
    runs them in order), and an op off the host lane no earlier than the end of the chain's host
    ops before it (the host issues it after them)."""
    segments: list[Segment] = []
    end = prev_start = prev_dur = 0.0
    chain: dict[Lane, float] = {}  # lane -> end of the chain's last op on it
    base = (0.0, 0.0)  # what the chain runs beside: (start, duration)
    for op, dur in zip(ops, durations, strict=True):
        if op.concurrent and op.beside > 1:
            prev_start, prev_dur = _covered(segments, op.beside)
        elif op.concurrent and chain:
            prev_start, prev_dur = base
        start = prev_start if op.concurrent else end
        if op.concurrent:
            base = (prev_start, prev_dur) if not chain else base
            start = max(start, chain.get(op.lane, start), start if op.lane == Lane.HOST else chain.get(Lane.HOST, start))
            chain[op.lane] = start + dur
        else:
            chain = {}
        segments.append(Segment(op, start, dur))
        tail = prev_dur / op.chunks if op.concurrent and op.chunks > 1 else 0.0
        end = max(end, start + dur + tail)
        if tail and not op.own_chunk:  # the last matmul chunk's communication follows it
            end = max(end, start + prev_dur + dur / op.chunks)
        prev_start, prev_dur = start, dur
    return CostedTask(end, tuple(segments), crosses_nodes)


def _covered(segments: Sequence[Segment], count: int) -> tuple[float, float]:
    """(start of the first, summed duration) of the last ``count`` compute-lane segments (as
    many as there are; none: the task's start and no duration)."""
    covered = [seg for seg in segments if seg.op.lane == Lane.COMPUTE][-count:]
    if not covered:
        return 0.0, 0.0
    return covered[0].offset_s, sum(seg.duration_s for seg in covered)


def cost_fixed(graph: TaskGraph) -> list[CostedTask]:
    """Costs of a graph whose ops all carry fixed durations (playground, replay)."""
    def duration(op: Op) -> float:
        if op.duration_s is None:
            raise ValueError(f"op {op.name!r} has no fixed duration")
        return op.duration_s
    return [layout_ops(t.ops, [duration(op) for op in t.ops]) for t in graph.tasks]


class ByCost(Generic[V]):
    """Values worked out from priced tasks, kept by the task's identity and a key of the
    caller's (a rank's load): priced tasks are shared by the ranks, micro-batches and plans that
    run the same ops, so identity finds them without hashing their segments. Each entry holds
    its task, so that its id stays its own; at most :data:`COST_MEMO_ENTRIES` entries, then it
    starts afresh."""

    def __init__(self) -> None:
        self._found: dict[tuple[object, ...], tuple[CostedTask, V]] = {}

    def __len__(self) -> int:
        return len(self._found)

    def get(self, cost: CostedTask, make: Callable[[], V], *key: object) -> V:
        """The value for ``cost`` (and ``key``), made by ``make`` the first time."""
        k = (id(cost), *key)
        held = self._found.get(k)
        if held is None:
            if len(self._found) >= COST_MEMO_ENTRIES:
                self._found.clear()
            held = self._found[k] = (cost, make())
        return held[1]
