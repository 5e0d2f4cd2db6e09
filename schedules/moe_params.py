"""Where an MoE model's parameters live under a plan: the routed experts (split over ep x etp,
reduced over the expert-data-parallel group) apart from everything else (attention, norms,
router, shared experts and dense MLPs: split over tp, reduced over dp x cp).

Units: parameter counts (elements).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from schedules.model import ModelSpec
from schedules.moe import expert_params, is_moe_layer, layer_params, moe_of
from schedules.plan import ParallelPlan


def routed_expert_params(model: ModelSpec, layer: int) -> int:
    """All routed experts of ``layer`` (0 for a dense layer)."""
    if not is_moe_layer(model, layer):
        return 0
    return moe_of(model).num_experts * expert_params(model)


def stage_non_expert_params(model: ModelSpec, layers: Iterable[int]) -> float:
    """Parameters of ``layers`` other than their routed experts (whole layers, before TP; a
    dense model's: all of them)."""
    return _non_expert_params(model, tuple(layers))


@lru_cache(maxsize=4096)
def _non_expert_params(model: ModelSpec, layers: tuple[int, ...]) -> float:
    """:func:`stage_non_expert_params`, cached (explore sizes every plan's stages)."""
    return float(sum(layer_params(model, i) - routed_expert_params(model, i) for i in layers))


def stage_expert_params(model: ModelSpec, plan: ParallelPlan, layers: Iterable[int]) -> float:
    """Routed-expert parameters of ``layers`` one rank holds: E / ep experts per MoE layer, each
    split over etp."""
    return _expert_params(model, plan.ep * plan.etp, tuple(layers))


@lru_cache(maxsize=4096)
def _expert_params(model: ModelSpec, split: int, layers: tuple[int, ...]) -> float:
    """:func:`stage_expert_params`, cached (the build asks for every block of every pass)."""
    return sum(routed_expert_params(model, i) for i in layers) / split
