"""The kinds of transformer block a model is made of, and what each answers per layer: its
parameters, its forward FLOPs and the activations it stores for the backward.

A dense model's blocks are all alike (:data:`DENSE`: one answer serves every layer, computed
once); an MoE model's differ layer by layer (:data:`MOE`: dense-MLP layers before
``first_dense_layers`` or off ``moe_layer_step``, MoE layers otherwise, with the attention geometry
of the MoE spec). :func:`layer_kind` is the one place that asks which a model is; the model-level
answers here (:func:`layer_flops`, :func:`model_flops_per_step`, the stored activations of a stage)
go through it. The ops of a block's feed-forward part are the layer shape's
(:class:`schedules.layer_ops.DenseFFN` or :class:`schedules.moe_ops.MoEShape`).

Units: FLOPs, bytes per GPU and micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedules.flops import LayerFlops, dense_layer_flops, logits_flops, moe_model_layer_flops
from schedules.memory import (
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    plan_activation_config,
)
from schedules.model import ModelSpec
from schedules.moe_memory import moe_layer_activation_bytes
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo


@dataclass(frozen=True)
class DenseLayers:
    """A dense model's blocks: every layer the same."""

    alike: bool = True

    def flops(self, model: ModelSpec, microbatch_size: int, layer: int) -> LayerFlops:
        """Forward FLOPs of a block (any ``layer``)."""
        return dense_layer_flops(model, microbatch_size)

    def stored_bytes(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
        """Activations one micro-batch leaves from a block's forward."""
        return layer_activation_bytes(model, plan.microbatch_size, plan_activation_config(plan))


@dataclass(frozen=True)
class MoELayers:
    """An MoE model's blocks: dense or MoE feed-forward layer by layer."""

    alike: bool = False

    def flops(self, model: ModelSpec, microbatch_size: int, layer: int) -> LayerFlops:
        """Forward FLOPs of block ``layer``."""
        return moe_model_layer_flops(model, microbatch_size * model.seq_len, layer)

    def stored_bytes(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
        """Activations one micro-batch leaves from block ``layer``'s forward."""
        return moe_layer_activation_bytes(model, plan, layer, plan_activation_config(plan))


LayerKind = DenseLayers | MoELayers
DENSE = DenseLayers()
MOE = MoELayers()


def layer_kind(model: ModelSpec) -> LayerKind:
    """The kind of ``model``'s blocks."""
    return DENSE if model.moe is None else MOE


def layer_flops(model: ModelSpec, microbatch_size: int, layer: int | None = None) -> LayerFlops:
    """Forward FLOPs of one block for ``microbatch_size`` sequences of ``model.seq_len`` tokens
    (``layer``: the 0-based block, which a model whose blocks differ needs)."""
    kind = layer_kind(model)
    if layer is None and not kind.alike:
        raise ValueError(f"model={model.name!r} is invalid here: its layers differ (MoE); pass the layer index")
    return kind.flops(model, microbatch_size, layer or 0)


def model_flops_per_step(model: ModelSpec, global_batch: int) -> float:
    """Model FLOPs (forward + backward, no recomputation) of one optimizer step.

    This is the numerator of MFU: 3 x forward FLOPs of all layers and the logits.
    """
    kind = layer_kind(model)
    if kind.alike:
        layers = model.num_layers * kind.flops(model, 1, 0).forward
    else:
        layers = sum(kind.flops(model, 1, i).forward for i in range(model.num_layers))
    return 3.0 * (layers + logits_flops(model, 1)) * global_batch


def stored_layer_bytes(model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
    """Activations one micro-batch leaves from block ``layer``'s forward (bytes per GPU)."""
    return layer_kind(model).stored_bytes(model, plan, layer)


def stage_layer_activation_bytes(model: ModelSpec, plan: ParallelPlan, stage: StageInfo) -> float:
    """The blocks' share of :func:`stage_activation_bytes` (without the embedding's and head's)."""
    kind = layer_kind(model)
    if kind.alike:
        return len(stage.layers) * kind.stored_bytes(model, plan, 0)
    return sum(kind.stored_bytes(model, plan, i) for i in stage.layers)


def stage_activation_bytes(model: ModelSpec, plan: ParallelPlan, stage: StageInfo) -> float:
    """Activations one micro-batch leaves on a virtual stage after its forward (bytes per GPU)."""
    cfg, mbs = plan_activation_config(plan), plan.microbatch_size
    total = stage_layer_activation_bytes(model, plan, stage)
    if stage.first:
        total += embedding_activation_bytes(model, mbs, cfg)
    if stage.last:
        total += head_activation_bytes(model, mbs, cfg)
    return total
