"""The TaskGraph: tasks on per-rank streams plus dependency edges.

The schedule builder makes one from a plan; trace replay makes one from a measured Timeline; the
simulator's engine runs both. A task is placed on a (rank, lane) stream; tasks of an ordered lane
run in the order they were added (as kernels on a CUDA stream do). A task's work is a sequence of
:class:`Op` s (FLOPs, bytes or a fixed duration); costs are attached later by the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from core.groups import CommGroup
from core.slot_init import slot_init
from core.timeline_meta import TimelineMeta
from core.vocab import Collective, GemmRole, Kind, Lane, OpClass

if TYPE_CHECKING:
    from core.task_columns import TaskColumns

__all__ = ["Op", "Task", "TaskGraph", "TaskGraphBuilder", "collective_op", "matmul", "moved_op"]


@slot_init  # a build makes ops and tasks by the hundred thousand: core.slot_init
@dataclass(frozen=True, slots=True)
class Op:
    """One piece of work inside a task; the Timeline shows one span per op.

    Attributes:
        lane: lane the span is drawn on (a TP all-reduce inside a compute task is ``Lane.TP``).
        kind: Timeline kind (fwd, bwd, all_reduce, ...).
        name: display name, e.g. "L3.mlp".
        op_class: cost class (:class:`core.vocab.OpClass`): gemm | attention | activation | elementwise |
            optimizer | alloc | a collective | p2p | fixed | step (a training step's host setup) |
            action (a pipeline action's) | host copies and CPU Adam.
        flops: floating-point operations (compute ops).
        bytes: HBM traffic for compute ops; message size for communication ops (bytes).
        dim: the group a communication op runs among (:class:`core.groups.CommGroup`), else None.
        layer: transformer layer index, -1 if none.
        duration_s: fixed duration in seconds (replay, playground); None = cost model decides.
        concurrent: runs alongside the previous op (e.g. ring-attention K/V exchange under the
            attention kernel); the task's clock advances by the longer of the two.
        m, n, k, batch: for a matmul op, its shape: ``batch`` products of an (m x k) and a
            (k x n) matrix (flops = 2·m·n·k·batch); for a fused attention op, the query tokens
            per sequence on this rank, the keys per sequence, the head dimension and sequences x
            heads; 0 when not known.
        chunks: for a ``concurrent`` op, how many chunks it and the previous op are pipelined in
            (tensor-parallel communication overlap: the previous op's first chunk, or its last,
            cannot overlap); 1 = plain overlap. See :func:`sim.costing.layout_ops`.
        rate: fraction of its op class's device rate this op's kernel reaches (1: the rate the
            device preset measured; a Triton attention kernel runs slower than FlashAttention-2,
            :mod:`schedules.attention_kernels`); divides the op's math time.
        own_chunk: for a pipelined ``concurrent`` op, whether one of its chunks (the rank's own
            shard) needs no communication; False: every chunk is communicated after its matmul
            chunk, the last one after the matmul.
        beside: for a ``concurrent`` op, how many previous compute-lane ops it runs beside (the
            matmuls of one fused op, e.g. torch's fused all-gather matmul of q, k and v); 1 = the
            previous op.
        split: for a matmul decomposed under a TP collective (``tp_comm_overlap``), how many
            GEMM kernels it runs as, each of the shape (m, n, k, batch) (one chunk; ``flops``
            stays the whole matmul's); 1 = one kernel of that shape.
            :data:`schedules.tp_overlap_gemms.TP_OVERLAP_GEMMS` gives each stack's decomposition.
        split_streams: how many CUDA streams the ``split`` kernels are issued on, round-robin
            (> 1: consecutive kernels may run together); priced by
            :func:`sim.gemm_pricing.decomposed_gemm_s`.
        causal: a fused attention op under a causal mask (its ``flops`` already the unmasked
            half); the pricing slows a fused op by the device's measured rate at its shape
            (``m`` query tokens per sequence on this rank, ``n`` the sequence, ``k`` the head
            dimension) and mask: :func:`schedules.attention_kernels.fused_attention_rate`.
        gemm_role: for a weight matmul of a linear layer, which of its GEMMs it is
            (:class:`core.vocab.GemmRole`); None for every other op.
        dtype: the math dtype of a compute op when it differs from the job's compute dtype
            ("fp8": an FP8 GEMM of a plan in FP8, :mod:`schedules.fp8`); "" = the job's.
        strided_bytes: of a memory-bound op's ``bytes``, those moved by 16-bit element-wise kernels
            with a broadcast or strided operand (PyTorch TensorIterator's non-vectorized kernel:
            a norm's weight multiply, RoPE's products with its cos/sin tables, a ``torch.chunk``
            half); priced at the device's ``strided_efficiency`` (:mod:`topo.strided_rate`).

    An op's hash is computed once, when it is made: tasks share their ops tuples, and prices are
    cached by them (:class:`sim.pricing.TaskCoster`), so a tuple hashes at the cost of a lookup
    per op.
    """

    lane: Lane
    kind: Kind
    name: str
    op_class: OpClass
    flops: float = 0.0
    bytes: float = 0.0
    dim: CommGroup | None = None
    layer: int = -1
    duration_s: float | None = None
    concurrent: bool = False
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    rate: float = 1.0
    chunks: int = 1
    own_chunk: bool = True
    beside: int = 1
    split: int = 1
    split_streams: int = 1
    causal: bool = False
    gemm_role: GemmRole | None = None
    dtype: str = ""
    strided_bytes: float = 0.0
    hash_: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hash_", hash(_op_fields(self)))

    def __hash__(self) -> int:
        return self.hash_


_op_fields = attrgetter(*(f.name for f in fields(Op) if f.compare))  # the constructor's fields, in its order


def moved_op(op: Op, lane: Lane, kind: Kind) -> Op:
    """``op`` on another lane with another Timeline kind (a receive mirroring its send): what
    ``dataclasses.replace(op, lane=lane, kind=kind)`` makes, at half its cost (one per pipeline receive)."""
    return Op(lane, kind, *_op_fields(op)[2:])


_COLLECTIVE_KIND = {c: Kind(c) for c in Collective}
_COLLECTIVE_CLASS = {c: OpClass(c) for c in Collective}


def matmul(lane: Lane, kind: Kind, name: str, m: int, n: int, k: int, *, batch: int = 1, layer: int = -1,
           op_class: OpClass = OpClass.GEMM) -> Op:
    """A matmul op of ``batch`` (m x k)·(k x n) products: 2·m·n·k·batch FLOPs."""
    return Op(lane, kind, name, op_class, flops=2.0 * m * n * k * batch, layer=layer, m=m, n=n, k=k, batch=batch)


def collective_op(lane: Lane, collective: Collective, name: str, **fields: Any) -> Op:
    """An op of ``collective``: its Timeline kind and its cost class are the collective's."""
    return Op(lane, _COLLECTIVE_KIND[collective], name, _COLLECTIVE_CLASS[collective], **fields)


def host_sync_op(kind: Kind, name: str, **fields: Any) -> Op:
    """The host waiting for the device (a ``.item()``, an ``isnan`` assert, a synchronize): no
    time of its own; the device then waits for the host's next launches (:mod:`sim.host_sync`)."""
    return Op(Lane.HOST, kind, name, OpClass.HOST_SYNC, duration_s=0.0, **fields)


@slot_init
@dataclass(frozen=True, slots=True)
class Task:
    """Work on one (rank, lane) stream.

    Attributes:
        rank: global rank that runs the task.
        lane: the stream (compute, comm.tp, comm.pp, comm.dp, ...).
        stream: the stream it runs on when that is not its lane's ("": its lane's): a replay keeps
            a measured run's CUDA streams and CPU threads apart (``"gpu0:7"``, ``"cpu:59811"``).
        kind: Timeline kind of the task as a whole.
        name: display name.
        ops: the work, executed in order.
        step, stage, chunk, microbatch, layer: labels copied to the Timeline (-1 if none).
        group: collective instance key; tasks on several ranks with the same key start together.
        peer: for a send, the receiving rank (the span is mirrored there as a recv), else -1.
        ordered: runs in its stream's program order (False: starts as soon as its deps are done).
    """

    rank: int
    lane: Lane
    kind: Kind
    name: str
    ops: tuple[Op, ...]
    step: int = 0
    stage: int = -1
    chunk: int = -1
    microbatch: int = -1
    layer: int = -1
    group: str = ""
    peer: int = -1
    ordered: bool = True
    stream: str = ""


@dataclass(frozen=True)
class TaskGraph:
    """Tasks plus dependency edges (``deps[i]`` = ids of tasks that must finish before task i).

    ``holds[i]`` (optional) = ids of tasks that must finish before task i may *end*: its span
    lasts until they are done even when its own work finished earlier (an asynchronous send
    whose completion the program only observes at a later wait).
    ``single_queue``: each rank's kernels start in the order the host issued them, across streams
    (one hardware work queue per GPU, ``CUDA_DEVICE_MAX_CONNECTIONS=1``: :mod:`sim.device_queue`).
    ``meta`` carries what the engine and the metrics need beyond the tasks: world size, which ranks
    the simulated ones stand for when folded, model FLOPs per step, and so on.
    Built once (:class:`TaskGraphBuilder`, or from finished sequences) and not changed after.
    """

    tasks: tuple[Task, ...] = ()
    deps: tuple[tuple[int, ...], ...] = ()
    meta: TimelineMeta = field(default_factory=TimelineMeta)
    holds: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    single_queue: bool = False

    @classmethod
    def of(cls, tasks: Iterable[Task], deps: Iterable[Iterable[int]], meta: TimelineMeta | None = None,
           holds: Mapping[int, Iterable[int]] | None = None) -> TaskGraph:
        """The graph of these tasks and edges, frozen (lists become tuples)."""
        return cls(tuple(tasks), tuple(map(tuple, deps)), meta or TimelineMeta(),
                   {i: tuple(h) for i, h in (holds or {}).items()})

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    @cached_property
    def columns(self) -> TaskColumns:
        """The tasks' labels, ops and edges as numpy columns, each made on first use and kept
        (:class:`core.task_columns.TaskColumns`; a graph is not changed after it is built)."""
        from core.task_columns import TaskColumns

        return TaskColumns(self)

    def __getstate__(self) -> dict[str, Any]:
        """The graph's fields (its cached columns are made again where it is unpickled)."""
        state = dict(self.__dict__)
        state.pop("columns", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def streams(self) -> dict[tuple[int, str], list[int]]:
        """Task ids per (rank, stream), in program order (a task's stream: its own, else its lane)."""
        out: dict[tuple[int, str], list[int]] = {}
        for i, t in enumerate(self.tasks):
            out.setdefault((t.rank, t.stream or t.lane), []).append(i)
        return out

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` view: node = task id (with its Task as ``task``), edge = dependency."""
        import networkx as nx

        g = nx.DiGraph()
        for i, t in enumerate(self.tasks):
            g.add_node(i, task=t)
        for i, ds in enumerate(self.deps):
            g.add_edges_from((d, i) for d in ds)
        return g


class TaskGraphBuilder:
    """Collects tasks and edges one by one (tests, replay), then builds the TaskGraph once."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.deps: list[list[int]] = []
        self.holds: dict[int, list[int]] = {}

    def add(self, task: Task, deps: Iterable[int] = ()) -> int:
        """Append ``task`` after ``deps`` (ids below 0 are dropped); returns its id."""
        self.tasks.append(task)
        self.deps.append([d for d in deps if d >= 0])
        return len(self.tasks) - 1

    def add_dep(self, task_id: int, dep_id: int) -> None:
        """Add the edge dep_id -> task_id (dep_id < 0: none)."""
        if dep_id >= 0:
            self.deps[task_id].append(dep_id)

    def add_hold(self, task_id: int, until_id: int) -> None:
        """Task ``task_id`` ends no earlier than task ``until_id`` (see :class:`TaskGraph`)."""
        if until_id >= 0:
            self.holds.setdefault(task_id, []).append(until_id)

    def __len__(self) -> int:
        return len(self.tasks)

    def build(self, meta: TimelineMeta | None = None) -> TaskGraph:
        """The TaskGraph of everything added."""
        return TaskGraph.of(self.tasks, self.deps, meta, self.holds)
