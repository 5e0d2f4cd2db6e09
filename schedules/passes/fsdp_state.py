"""The state of one rank's step as the FSDP2 pass (:mod:`schedules.passes.dp_torch`) walks it,
and what its parts share: the stage's units (the root and one per block), their labels and the
compute-stream tasks they make."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, Offload
from schedules.actions import Action
from schedules.layer_kinds import layer_kind
from schedules.passes.program import ActionSlot, BuildContext, Coords, Key, Record, pass_layers
from schedules.stages import StageInfo

ROOT = -1  # unit id of the stage's root (embedding, final norm, head)
POST_BACKWARD_TOUCHES = 4  # reads+writes of a unit's gradient bytes in FSDP's post-backward copy/scale
COPY_OUT_TOUCHES = 2  # read the gathered buffer, write the unsharded parameters
COPY_IN_TOUCHES = 2  # read the parameter shard, write it into the all-gather buffer
# Buffers the copies write that are freshly allocated (first touch: page faults on a CPU host,
# op class "alloc"), in units of the bytes they cover; read off the torch 2.13 traces:
# replicate's post-backward writes two new unit-sized buffers (fsdp::chunk_cat, then a copy_),
# fully_shard's one (fsdp::chunk_cat; the reduce-scatter's own copy is inside the collective);
# the copy-in writes its shard into a new all-gather buffer (whose other shards the all-gather
# itself writes first). The copy-out (``fsdp::split_with_sizes_copy``, 3-5 ms per 11.8 MB block,
# the streaming time) finds the unsharded parameters' storage, re-allocated at the same size after
# every reshard, already touched.
POST_BACKWARD_FRESH = {"replicate": 2, "fully_shard": 1}


def blocks(ctx: BuildContext, stage: StageInfo, a: Action) -> tuple[tuple[int, ...], ...]:
    """One block per layer with ZeRO-2/3 (each unit gathers before it computes), else one (worked
    out once per build for each stage and phase)."""
    key = ("fsdp_blocks", stage.index, a.phase)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = _blocks(ctx, stage, a.phase)
    return found  # type: ignore[no-any-return]


def _blocks(ctx: BuildContext, stage: StageInfo, phase: str) -> tuple[tuple[int, ...], ...]:
    layers = pass_layers(stage, phase)
    if ctx.zero >= 2 and layers:
        return tuple((layer,) for layer in layers)
    return (layers,) if layers else ((),)


def units(stage: StageInfo) -> list[tuple[int, float]]:
    """(unit, parameters) of a stage: the root (if it holds any) then the blocks in order."""
    root = stage.embedding_params_local + stage.head_params_local
    return ([(ROOT, root)] if root > 0 else []) + [(layer, stage.layer_params_local) for layer in stage.layers]


def unit_label(unit: int) -> str:
    """A unit's name in task names: "root" or "L<layer>"."""
    return "root" if unit == ROOT else f"L{unit}"


def host_offload(ctx: BuildContext) -> bool:
    """FSDP2's CPUOffloadPolicy is in effect (ZeRO-2/3 with DP)."""
    return ctx.plan.offload != Offload.NONE and ctx.zero >= 2


def trainer_edp(ctx: BuildContext) -> int:
    """Ranks of the trainer's (and AutoModel's) expert-data-parallel group, over which a
    layer's routed experts are their own FSDP unit: dp / ep, 1 for a dense model
    (:meth:`schedules.layer_kinds.MoELayers.trainer_expert_data_ranks`)."""
    return layer_kind(ctx.model).trainer_expert_data_ranks(ctx.plan)


def experts_state(stage: StageInfo, unit: int) -> tuple[int, int, str]:
    """The sharding-state key of layer ``unit``'s experts unit."""
    return (stage.index, unit, "experts")


@dataclass
class FsdpStep:
    """One rank's step as the pass walks it: which units are sharded, which gathers are issued
    and not yet copied out, how many backwards each stage ran, the reductions the optimizer waits for."""

    ctx: BuildContext
    c: Coords
    step: int
    sharded: dict[tuple[int, int] | tuple[int, int, str], bool] = field(default_factory=dict)
    issued: dict[tuple[int, int], Key] = field(default_factory=dict)
    backwards: dict[int, int] = field(default_factory=dict)
    pending: list[Key] = field(default_factory=list)
    red: Key | None = None  # the latest reduction issued (the next post-backward copy waits for it)
    out: list[Record] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.ctx.rank(self.c)


def compute_task(s: FsdpStep, slot: ActionSlot, kind: Kind, *ops: Op, name: str | None = None) -> Task:
    """A compute-stream task of ``ops`` labelled with ``slot``'s action and the first op's layer."""
    a = slot.action
    return Task(rank=s.rank, lane=Lane.COMPUTE, kind=kind, name=name or ops[0].name, ops=ops, step=s.step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=ops[0].layer)
