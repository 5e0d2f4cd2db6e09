"""Pipeline schedules as data: per pipeline rank, an ordered list of compute actions.

An action prints like torch.distributed.pipelining's ``_Action``: ``"2F0"`` is virtual stage 2,
forward, micro-batch 0. ``B`` is the backward (the input-gradient half when the schedule also has
``W`` actions, the full backward otherwise); ``W`` is the weight-gradient half.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from core.slot_init import slot_init
from core.vocab import Phase

PHASES = tuple(Phase)
STAGE_MAPS = ("loop", "v")


@slot_init  # a schedule holds one per micro-batch, stage and phase
@dataclass(frozen=True, slots=True)
class Action:
    """One compute action of a pipeline schedule.

    Attributes:
        stage: virtual stage index in pipeline order (0 .. pp*vpp-1).
        phase: "F" (forward), "B" (backward or its input-gradient half), "W" (weight gradient).
        microbatch: micro-batch index (0-based).
        chunk: model chunk on the owning rank (0 .. vpp-1).
    """

    stage: int
    phase: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.stage}{self.phase}{self.microbatch}"

    def label(self, with_chunk: bool = False) -> str:
        """Rank-local label: ``"F3"``, or ``"F3c1"`` with the chunk when ranks hold several."""
        return f"{self.phase}{self.microbatch}" + (f"c{self.chunk}" if with_chunk else "")


@dataclass(frozen=True, kw_only=True)
class PipelineSchedule:
    """The compute order of every pipeline rank.

    Attributes:
        name: schedule name (registry key).
        pp: pipeline ranks.
        microbatches: micro-batches per step.
        vpp: chunks (virtual stages) per rank.
        orders: ``orders[r]`` is rank r's actions in execution order.
        stage_map: how virtual stages sit on ranks: "loop" (stage = chunk*pp + rank, Megatron and
            torch interleaving) or "v" (chunk 0 on rank r is stage r, chunk 1 is stage 2*pp-1-r).
    """

    name: str
    pp: int
    microbatches: int
    vpp: int
    orders: tuple[tuple[Action, ...], ...]
    stage_map: str = "loop"

    @property
    def num_stages(self) -> int:
        """Virtual stages: pp * vpp."""
        return self.pp * self.vpp

    @cached_property
    def split_backward(self) -> bool:
        """True when backward is split into B (input) and W (weight) actions (found once)."""
        return any(a.phase == Phase.W for order in self.orders for a in order)

    def stage_of(self, rank: int, chunk: int) -> int:
        """Virtual stage held by ``rank`` as its ``chunk``-th chunk."""
        return stage_index(rank, chunk, self.pp, self.stage_map)

    def rank_of(self, stage: int) -> int:
        """Pipeline rank that holds virtual stage ``stage``."""
        return stage_rank(stage, self.pp, self.stage_map)

    def labels(self) -> list[list[str]]:
        """Per rank, the actions as rank-local labels (chunk suffix when vpp > 1)."""
        return [[a.label(self.vpp > 1) for a in order] for order in self.orders]


def stage_index(rank: int, chunk: int, pp: int, stage_map: str = "loop") -> int:
    """Virtual stage of (rank, chunk) under a stage map."""
    if stage_map == "v":
        return rank if chunk % 2 == 0 else 2 * pp - 1 - rank
    return chunk * pp + rank


def stage_rank(stage: int, pp: int, stage_map: str = "loop") -> int:
    """Owning rank of a virtual stage under a stage map."""
    if stage_map == "v":
        return stage if stage < pp else 2 * pp - 1 - stage
    return stage % pp


def stage_chunk(stage: int, pp: int, stage_map: str = "loop") -> int:
    """Chunk index of a virtual stage on its owning rank."""
    return stage // pp
