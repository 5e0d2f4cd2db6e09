"""What each virtual pipeline stage holds: its layers, the embedding/head, and its parameters."""

from __future__ import annotations

from dataclasses import dataclass

from schedules.model import ModelSpec
from schedules.moe_params import stage_expert_params, stage_non_expert_params
from schedules.plan import ParallelPlan, stage_layers
from schedules.plan.layout import V_SCHEDULES


@dataclass(frozen=True, kw_only=True)
class StageInfo:
    """One virtual stage.

    Attributes:
        index: virtual stage index in pipeline order.
        layers: global indices of the transformer blocks it holds.
        first: holds the embedding.
        last: holds the final norm, output head and loss.
        layer_params_local: parameters of one block on one TP rank, routed experts apart (the
            mean over the stage's blocks: an MoE model's differ layer by layer).
        embedding_params_local / head_params_local: on one TP rank (vocab-parallel), 0 if absent.
        expert_params_local: routed-expert parameters of all the stage's MoE layers on one rank
            (split over ep x etp; reduced and sharded over the expert-data-parallel group, not
            counted in ``params_local``); 0 for a dense model.
    """

    index: int
    layers: tuple[int, ...]
    first: bool
    last: bool
    layer_params_local: float
    embedding_params_local: float
    head_params_local: float
    expert_params_local: float = 0.0

    @property
    def params_local(self) -> float:
        """Parameters this stage holds on one TP rank (before ZeRO sharding)."""
        return (len(self.layers) * self.layer_params_local + self.embedding_params_local
                + self.head_params_local)


def ends_apart(plan: ParallelPlan) -> bool:
    """Do the first and the last virtual stage sit on two pipeline ranks? Not without pipelining,
    nor under a V-shaped schedule, which puts both on rank 0."""
    return plan.pp > 1 and plan.schedule not in V_SCHEDULES


def plan_stages(model: ModelSpec, plan: ParallelPlan) -> list[StageInfo]:
    """The pp*vpp virtual stages of ``plan`` for ``model``, in pipeline order.

    With tied embeddings and the pipeline's ends on two ranks (:func:`ends_apart`), the last stage
    keeps its own copy of the embedding matrix for the output projection (as Megatron-LM does).
    """
    counts = stage_layers(model, plan)
    n = len(counts)
    tied_copy = model.tied_embeddings and ends_apart(plan)
    head_matrix = model.vocab_size * model.hidden_size if tied_copy else 0
    stages, start = [], 0
    for i, count in enumerate(counts):
        layers = tuple(range(start, start + count))
        stages.append(StageInfo(
            index=i,
            layers=layers,
            first=i == 0,
            last=i == n - 1,
            expert_params_local=stage_expert_params(model, plan, layers),
            layer_params_local=stage_non_expert_params(model, layers) / max(1, count) / plan.tp,
            embedding_params_local=model.embedding_params() / plan.tp if i == 0 else 0.0,
            head_params_local=(model.head_params() + head_matrix) / plan.tp if i == n - 1 else 0.0,
        ))
        start += count
    return stages
