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

from collections.abc import Callable
from dataclasses import dataclass

from core.taskgraph import Op
from core.vocab import Runtime
from schedules.attention_ops import model_layer_shape
from schedules.flops import LayerFlops, dense_layer_flops, logits_flops, moe_model_layer_flops
from schedules.layer_ops import LayerShape, layer_shape
from schedules.memory import (
    ActivationConfig,
    ModelStateBytes,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    plan_activation_config,
    recompute_working_bytes,
)
from schedules.model import ModelSpec
from schedules.moe import moe_of
from schedules.moe_memory import expert_state_bytes, moe_layer_activation_bytes
from schedules.moe_torch import per_expert_calls, runs_on_local_tensors, with_counts_exchange
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo


@dataclass(frozen=True)
class DenseLayers:
    """A dense model's blocks: every layer the same.

    Attributes:
        alike: one answer serves every layer.
        compute_splits: pieces a block's compute is cut into per micro-batch (one).
        overlap_schedules: pipeline schedules that exist to hide this kind's communication (none).
        comparison_class: the class its jobs are compared in (:mod:`sim.accuracy.job_class`);
            None: its plan's parallelism decides.
    """

    alike: bool = True
    compute_splits: int = 1
    overlap_schedules: tuple[str, ...] = ()
    comparison_class: str | None = None

    def flops(self, model: ModelSpec, microbatch_size: int, layer: int) -> LayerFlops:
        """Forward FLOPs of a block (any ``layer``)."""
        return dense_layer_flops(model, microbatch_size)

    def stored_bytes(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
        """Activations one micro-batch leaves from a block's forward."""
        return layer_activation_bytes(model, plan.microbatch_size, plan_activation_config(plan))

    def shape(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> LayerShape:
        """A block's sizes on one rank (any ``layer``)."""
        return layer_shape(model, plan)

    def runtime_calls(self, model: ModelSpec, plan: ParallelPlan, ops: tuple[Op, ...]) -> tuple[Op, ...]:
        """A block's ops as the runtime issues them: as built."""
        return ops

    def expert_states(self, plan: ParallelPlan, stages: list[StageInfo]) -> ModelStateBytes | None:
        """No experts: None."""
        return None

    def working_bytes(self, model: ModelSpec, plan: ParallelPlan, cfg: ActivationConfig) -> float:
        """One block's rematerialized activations while its backward runs
        (:func:`schedules.memory.recompute_working_bytes`)."""
        return recompute_working_bytes(model, plan.microbatch_size, cfg)

    def expert_data_ranks(self, plan: ParallelPlan) -> int:
        """Ranks a routed expert's gradients are reduced over: none to reduce, 1."""
        return 1

    def trainer_expert_data_ranks(self, plan: ParallelPlan) -> int:
        """Ranks a layer's routed experts are sharded over as their own FSDP unit: none, 1."""
        return 1

    def overlaps_all_to_alls(self, plan: ParallelPlan) -> bool:
        """No expert all-to-alls to overlap: False."""
        return False

    def expert_parallel_degrees(self, model: ModelSpec, dp: int, asked: tuple[int, ...] | None) -> tuple[int, ...]:
        """Expert-parallel degrees a search tries with ``dp`` data-parallel ranks: no experts, (1,)."""
        return (1,)

    def tp_plan_defaults(self, tp: int) -> dict[str, object]:
        """Plan fields a job of this kind defaults to under ``tp`` > 1: none."""
        return {}

    def local_tensor_ops(self, plan: ParallelPlan) -> Callable[[Op], bool] | None:
        """Which compute ops run outside DTensor under TP: none (None)."""
        return None

    def experts_label(self, model: ModelSpec) -> str:
        """The experts a token uses, as a table shows them: none, ""."""
        return ""


@dataclass(frozen=True)
class MoELayers:
    """An MoE model's blocks: dense or MoE feed-forward layer by layer.

    Attributes:
        alike: False, the answers differ layer by layer.
        compute_splits: pieces a block's compute is cut into per micro-batch: two, around the
            expert dispatch and combine (an estimate for sizing, :mod:`sim.size_guard`).
        overlap_schedules: DualPipeV, whose pairs hide the all-to-alls
            (:mod:`schedules.passes.ep_overlap`); explore adds it to its default schedules.
        comparison_class: "moe": MoE jobs are compared with MoE jobs, whatever their plan.
    """

    alike: bool = False
    compute_splits: int = 2
    overlap_schedules: tuple[str, ...] = ("dualpipev",)
    comparison_class: str | None = "moe"

    def flops(self, model: ModelSpec, microbatch_size: int, layer: int) -> LayerFlops:
        """Forward FLOPs of block ``layer``."""
        return moe_model_layer_flops(model, microbatch_size * model.seq_len, layer)

    def stored_bytes(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
        """Activations one micro-batch leaves from block ``layer``'s forward."""
        return moe_layer_activation_bytes(model, plan, layer, plan_activation_config(plan))

    def shape(self, model: ModelSpec, plan: ParallelPlan, layer: int) -> LayerShape:
        """Block ``layer``'s sizes on one (tp, cp, ep) rank: its attention geometry, dense or MoE
        feed-forward (:mod:`schedules.attention_ops`)."""
        return model_layer_shape(model, plan, layer)

    def runtime_calls(self, model: ModelSpec, plan: ParallelPlan, ops: tuple[Op, ...]) -> tuple[Op, ...]:
        """The torch runtime's MoE block: one call per expert and weight
        (:func:`schedules.moe_torch.per_expert_calls`: the included trainer's loop, and NeMo
        AutoModel's grouped_gemm, which runs a cuBLAS call per expert on H100) and, with the
        all-to-all dispatcher, the trainer's counts exchange
        (:func:`schedules.moe_torch.with_counts_exchange`; DeepEP exchanges its counts inside its
        own dispatch, :mod:`sim.host_sync`); the megatron runtime's as built."""
        if plan.framework != Runtime.TORCH:
            return ops
        moe = moe_of(model)
        ops = per_expert_calls(ops, model.ffn_inputs, moe.num_experts // plan.ep)
        if plan.ep == 1 or plan.moe_dispatcher != "alltoall":
            return ops
        return with_counts_exchange(ops, moe.num_experts)

    def expert_states(self, plan: ParallelPlan, stages: list[StageInfo]) -> ModelStateBytes | None:
        """Model states of a rank's routed experts on ``stages``, sharded over the
        expert-data-parallel group (:func:`schedules.moe_memory.expert_state_bytes`)."""
        return expert_state_bytes(plan, stages)

    def working_bytes(self, model: ModelSpec, plan: ParallelPlan, cfg: ActivationConfig) -> float:
        """One block's rematerialized activations while its backward runs: under full
        recomputation the largest block's whole stored set; per-op SAC's is not modelled for MoE
        layers (0, :mod:`schedules.moe_memory`)."""
        if plan.recompute != "full":
            return 0.0
        full = ActivationConfig(tp=cfg.tp, cp=cfg.cp, sequence_parallel=cfg.sequence_parallel,
                                flash_attention=cfg.flash_attention)
        return max(moe_layer_activation_bytes(model, plan, i, full) for i in range(model.num_layers))

    def expert_data_ranks(self, plan: ParallelPlan) -> int:
        """Ranks a routed expert's gradients are reduced over: the expert-data-parallel group
        (``plan.edp``)."""
        return plan.edp

    def trainer_expert_data_ranks(self, plan: ParallelPlan) -> int:
        """Ranks a layer's routed experts are sharded over as their own FSDP unit: the trainer's
        (and NeMo AutoModel's) expert-data-parallel group, dp / ep (EP ranks are DP ranks:
        ``profiler/trainer/moe_parallel.py``; AutoModel's ``ep_shard`` mesh dimension, dp / ep:
        nemo_automodel/components/distributed/fsdp2.py @ 01926a5c)."""
        return plan.dp // plan.ep

    def overlaps_all_to_alls(self, plan: ParallelPlan) -> bool:
        """The plan overlaps the expert all-to-alls (``overlaps_moe``) and has expert parallelism."""
        return plan.overlaps_moe and plan.ep * plan.etp > 1

    def expert_parallel_degrees(self, model: ModelSpec, dp: int, asked: tuple[int, ...] | None) -> tuple[int, ...]:
        """Expert-parallel degrees a search tries with ``dp`` data-parallel ranks: those ``asked``,
        or every power of two, that divide both the experts and dp."""
        experts = moe_of(model).num_experts
        tried = asked if asked is not None else tuple(2**i for i in range(dp.bit_length()))
        return tuple(e for e in tried if dp % e == 0 and experts % e == 0)

    def tp_plan_defaults(self, tp: int) -> dict[str, object]:
        """Plan fields an MoE job defaults to under ``tp`` > 1: sequence parallelism (Megatron-Core's
        MoE layers need it with TP) and ``etp`` = tp (Megatron-Core's
        ``--expert-tensor-parallel-size`` defaults to TP)."""
        return {"sequence_parallel": True, "etp": tp}

    def local_tensor_ops(self, plan: ParallelPlan) -> Callable[[Op], bool] | None:
        """Which compute ops run outside DTensor under TP: the torch runtime's MoE block's
        (:func:`schedules.moe_torch.runs_on_local_tensors`); None on other runtimes."""
        return runs_on_local_tensors if plan.framework == Runtime.TORCH else None

    def experts_label(self, model: ModelSpec) -> str:
        """The experts a token uses, as a table shows them: "top_k of num_experts"."""
        moe = moe_of(model)
        return f"{moe.top_k} of {moe.num_experts}"


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
