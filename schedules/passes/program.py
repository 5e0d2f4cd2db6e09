"""What every build pass reads: the job (:class:`BuildContext`), a rank's step program (its
actions and their layer blocks) and the records a pass returns.

A pass is a function from (context, rank, step program) to records: tasks placed at *points* of
the rank's program, extra dependency edges and holds. Records name tasks by *keys* (hashable
tuples); :mod:`schedules.passes.assemble` orders every rank's records by point, gives the tasks
ids and resolves the keys. Nothing is edited after it is made.

Points are sort keys of a rank's step, in program order:

    step start < [before action i < (before block b < block b < after block b)... < after action i]... < step end
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from core.slot_init import slot_init
from core.taskgraph import Op, Task, moved_op
from core.vocab import Collective, Kind, Lane, Phase, Runtime
from schedules.actions import Action, PipelineSchedule
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo
from schedules.work import Work

Key = Hashable
Point = tuple[int, int, int, int]
RankOf = Callable[[int, int, int, int], int]
"""(tp, cp, dp, pp) coordinates -> global rank."""

STEP_START: Point = (0, 0, 0, 0)
STEP_END: Point = (2, 0, 0, 0)
_AFTER = 1 << 40


def before_action(index: int, sub: int = 0) -> Point:
    """Before action ``index`` (``sub`` orders records of one pass there)."""
    return (1, index, 0, sub)


def before_block(index: int, block: int) -> Point:
    return (1, index, 3 * block + 1, 0)


def block_point(index: int, block: int) -> Point:
    return (1, index, 3 * block + 2, 0)


def after_block(index: int, block: int) -> Point:
    return (1, index, 3 * block + 3, 0)


def after_action(index: int) -> Point:
    return (1, index, _AFTER, 0)


class PrevCompute:
    """A dependency on the rank's latest compute-stream task before this record in program
    order (what a CUDA event recorded on the compute stream at this point would fire on)."""

    def __repr__(self) -> str:
        return "PREV_COMPUTE"


PREV_COMPUTE = PrevCompute()
Dep = Key | PrevCompute


@slot_init
@dataclass(frozen=True, slots=True)
class Emit:
    """A task at ``point``, named ``key`` (None: nothing refers to it), after ``deps``. Records
    are made one or more per task: :func:`core.slot_init.slot_init` halves their ``__init__``."""

    point: Point
    task: Task
    key: Key | None = None
    deps: tuple[Dep, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class Edge:
    """Task ``target`` also waits for ``source`` (recorded at ``point`` of the target's rank)."""

    point: Point
    target: Key
    source: Dep


@slot_init
@dataclass(frozen=True, slots=True)
class Hold:
    """Task ``target`` ends no earlier than ``until`` (see :class:`core.taskgraph.TaskGraph`)."""

    point: Point
    target: Key
    until: Dep


@slot_init
@dataclass(frozen=True, slots=True)
class Alias:
    """``key`` names the same task as ``target``."""

    key: Key
    target: Key


Record = Emit | Edge | Hold | Alias


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How to build: ``folded`` simulates one rank per pipeline rank; ``steps`` training steps;
    ``gloo_host``: the ranks are CPU processes whose collectives run on gloo: a call blocks the
    thread that issues it until it is done (for calls without ``async_op``; NCCL returns at once
    and runs them on a stream), which matters where the trainer overlaps by issuing early
    (FSDP2's backward prefetch), and a reduce-scatter is an all-reduce on a new copy of the
    input, whose pages are touched for the first time (:mod:`schedules.passes.dp_torch`);
    ``single_queue``: one hardware work queue per GPU (``TaskGraph.single_queue``)."""

    folded: bool = True
    steps: int = 1
    gloo_host: bool = False
    single_queue: bool = False


@slot_init
@dataclass(frozen=True, slots=True)
class Coords:
    """A rank's position in the (tp, cp, dp, pp) grid."""

    tp: int
    cp: int
    dp: int
    pp: int


@slot_init
@dataclass(frozen=True, slots=True)
class ActionSlot:
    """Action ``index`` of a rank's order, its virtual stage, and its layer blocks in execution
    order (one compute task each)."""

    index: int
    action: Action
    stage: StageInfo
    blocks: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    """One build's inputs and what follows from them (read-only)."""

    model: ModelSpec
    plan: ParallelPlan
    schedule: PipelineSchedule
    options: BuildOptions
    work: Work
    stages: tuple[StageInfo, ...]
    rank_of: RankOf

    @cached_property
    def split(self) -> bool:
        """Backward is split into B and W actions."""
        return self.schedule.split_backward

    @cached_property
    def shard(self) -> int:
        """Ranks one copy of the model states is sharded over: the DP x CP group, or one
        replica's share of it under hybrid sharding (:attr:`ParallelPlan.zero_shard`)."""
        return self.plan.zero_shard

    @cached_property
    def dp_active(self) -> bool:
        """There is data-parallel communication (a DP x CP group of more than one rank)."""
        return self.shard > 1

    @cached_property
    def zero(self) -> int:
        """The ZeRO stage in effect (0 without data parallelism)."""
        return self.plan.zero if self.dp_active else 0

    @cached_property
    def grad_reduction(self) -> Collective:
        """The megatron runtime's data-parallel gradient collective: an all-reduce without ZeRO
        (or under ZeRO-1 with ``zero1_grad_reduction="all-reduce"``), else a reduce-scatter."""
        return Collective.ALL_REDUCE if self.zero == 0 or self.plan.all_reduces_grads else Collective.REDUCE_SCATTER

    @cached_property
    def grad_phase(self) -> str:
        """The action phase that produces weight gradients."""
        return Phase.W if self.split else Phase.B

    @cached_property
    def shared_ops(self) -> dict[tuple[object, ...], tuple[Op, ...]]:
        """The build's ops tuples by what makes them (a block's stage, phase, layers, ...; a
        pipeline message's): passes hand every task of one kind the same tuple, so a block's ops
        are made once and tiled over micro-batches and ranks, and priced once per rank
        (:meth:`sim.pricing.TaskCoster.cost_task` knows a tuple by its identity)."""
        return {}

    @cached_property
    def memo(self) -> dict[Hashable, Any]:
        """The build's pure per-block results by what they depend on (a block's collectives, its
        expert parameters, ...): a pass works them out once and reads them for every micro-batch."""
        return {}

    @cached_property
    def last_microbatch(self) -> int:
        return self.plan.num_microbatches - 1

    @cached_property
    def torch(self) -> bool:
        """The included trainer's runtime (framework="torch")."""
        return self.plan.framework == Runtime.TORCH

    def rank(self, c: Coords, pp: int | None = None) -> int:
        """Global rank of ``c`` (optionally with another pipeline coordinate)."""
        return self.rank_of(c.tp, c.cp, c.dp, c.pp if pp is None else pp)

    def message_ops(self, a: Action, what: str) -> tuple[Op, ...]:
        """The one op of ``a``'s pipeline message: its send (``what`` "act" or "grad") or its
        receive ("recv": the send's op on the receiving side), made once per build for every
        rank that sends or receives a message of its label (:attr:`shared_ops`): every stage's
        message of a micro-batch and chunk is the same op (:meth:`schedules.work.Work.send_op`)."""
        key = ("p2p", what, a.phase, a.microbatch, a.chunk)
        ops = self.shared_ops.get(key)
        if ops is None:
            op = self.work.send_op(a, f"{what} {self.label(a)}")
            ops = self.shared_ops[key] = (moved_op(op, Lane.PP, Kind.RECV) if what == "recv" else op,)
        return ops

    def label(self, a: Action) -> str:
        """Rank-local action label (with the chunk when ranks hold several)."""
        return a.label(self.schedule.vpp > 1)

    def rank_stages(self, c: Coords) -> list[StageInfo]:
        """The virtual stages pipeline rank ``c.pp`` holds, chunk by chunk."""
        return [self.stages[self.schedule.stage_of(c.pp, ch)] for ch in range(self.schedule.vpp)]


def block_key(rank: int, step: int, index: int, block: int) -> Key:
    """Key of compute block ``block`` of action ``index`` of ``rank``'s ``step``."""
    return ("blk", rank, step, index, block)


def first_block_key(rank: int, step: int, slot: ActionSlot) -> Key:
    return block_key(rank, step, slot.index, 0)


def last_block_key(rank: int, step: int, slot: ActionSlot) -> Key:
    return block_key(rank, step, slot.index, len(slot.blocks) - 1)


def step_end_key(rank: int, step: int) -> Key:
    """Key of the task a rank's step ends with (the next step starts after it)."""
    return ("step_end", rank, step)


def block_params(stage: StageInfo, layers: tuple[int, ...]) -> float:
    """Parameters (on one TP rank) a block of layers holds, with the embedding or head when the
    block holds the stage's first or last layer."""
    params = len(layers) * stage.layer_params_local
    if stage.first and stage.layers and stage.layers[0] in layers:
        params += stage.embedding_params_local
    if stage.last and stage.layers and stage.layers[-1] in layers:
        params += stage.head_params_local
    return params


def pass_layers(stage: StageInfo, phase: str) -> tuple[int, ...]:
    """A stage's layers in the order a pass of ``phase`` runs them (reversed for backward)."""
    return stage.layers if phase == Phase.F else tuple(reversed(stage.layers))


def optimizer_key(rank: int, step: int) -> Key:
    """Key of a rank's optimizer step (what the step-end waits of other passes feed)."""
    return ("optimizer", rank, step)
