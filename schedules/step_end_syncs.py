"""What the megatron runtime runs between a step's last gradient reduction and its optimizer
update, besides the reductions: the tied embedding's gradient all-reduce and the gradient norm.
Each a fact of the code:

- **Tied embeddings across the pipeline.** With pp > 1 the last stage keeps its own copy of the
  word embedding for the output projection (:func:`schedules.stages.plan_stages`), and after the
  data-parallel reductions the first and the last stage all-reduce that weight's fp32
  ``main_grad`` (vocab / tp x h elements) over the embedding group, a synchronous
  ``torch.distributed.all_reduce`` (Megatron-Core r0.8.0
  ``megatron/core/distributed/finalize_model_grads.py`` ``_allreduce_word_embedding_grads``
  l.13-40, called by ``finalize_model_grads`` after ``finish_grad_sync``; Megatron-LM 2021
  ``_allreduce_embedding_grads``; DeepSpeed's ``PipelineEngine._exec_reduce_tied_grads``
  all-reduces a ``TiedLayerSpec`` weight's gradient, BF16_Optimizer's fp32 ``_hp_grad``).
- **The gradient norm.** ``optimizer.step()`` computes the norm of the gradients it updates
  (``multi_tensor_l2norm``: a read of each fp32 gradient, :data:`NORM_READ_BYTES_PER_PARAM`),
  all-reduces its square, one fp32, and reads it on the host with ``.item()``
  (``megatron/core/optimizer/clip_grads.py`` l.105-118): the host waits for the GPU, which then
  waits for the optimizer's launches (:mod:`sim.host_sync`). The group is the model-parallel
  group (TP x PP) and, with the distributed optimizer, the whole world
  (``distrib_optimizer.py`` l.547-552: "With the distributed optimizer, the model parallel group
  is the entire world"); the rule here: the world whenever the optimizer state is sharded
  (ZeRO >= 1, whose norm needs every shard), TP x PP otherwise. The all-reduce makes every rank's
  update wait for the last rank's gradients: a barrier across the pipeline stages.

Not modelled: with sequence parallelism Megatron also all-reduces the norm weights' and row-parallel
biases' gradients over TP (``_allreduce_layernorm_grads``: ~6h fp32 per layer, tens of
microseconds on NVLink); the offloaded optimizer steps (:mod:`schedules.passes.offload`) keep
their own order. Units: bytes.
"""

from __future__ import annotations

from core.groups import MP, PP_ENDS, WORLD, CommGroup
from core.taskgraph import Op, collective_op, host_sync_op
from core.vocab import Collective, Kind, Lane, Offload, OpClass, Runtime
from schedules.model import ModelSpec
from schedules.optimizer_traffic import ClipKind, clip_bytes_per_param
from schedules.plan import ParallelPlan
from schedules.stages import ends_apart

FP32 = 4
GRAD_NORM_BYTES = FP32
"""The all-reduced squared norm: one fp32."""
NORM_READ_BYTES_PER_PARAM = clip_bytes_per_param(ClipKind.MEGATRON, clipped=False)
"""HBM bytes the norm reads per updated parameter: Megatron's unclipped ``clip_grad_norm_fp32``
over fp32 main gradients (:func:`schedules.optimizer_traffic.clip_bytes_per_param`; the scaling of
a clipped step is not charged, as before)."""


def separate_norm(plan: ParallelPlan) -> bool:
    """Does Megatron's norm run as its own task before a GPU update (the megatron runtime with its
    fused optimizer, whose traffic then counts the norm's read apart:
    :func:`schedules.stage_ops.optimizer_ops`; no offload, whose steps keep their own order)?"""
    return plan.framework == Runtime.MEGATRON and plan.fused_optimizer and plan.offload == Offload.NONE


def norm_group(plan: ParallelPlan) -> CommGroup:
    """The group the gradient norm is all-reduced over (module docstring)."""
    return WORLD if plan.zero >= 1 else MP


def embedding_grad_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Bytes of the tied embedding's gradient all-reduce on a first or last stage (0: none)."""
    if not (model.tied_embeddings and ends_apart(plan)):
        return 0.0  # untied, or one rank holds the one weight
    return FP32 * model.vocab_size / plan.tp * model.hidden_size


def embedding_grad_ops(model: ModelSpec, plan: ParallelPlan) -> tuple[Op, ...]:
    """The tied embedding's gradient all-reduce between the first and the last stage."""
    size = embedding_grad_bytes(model, plan)
    return (collective_op(Lane.DP, Collective.ALL_REDUCE, "embedding_grads.allreduce", bytes=size,
                          dim=PP_ENDS),) if size else ()


def grad_norm_ops(params_local: float) -> tuple[Op, ...]:
    """The norm over the ``params_local`` gradients this rank updates (its shard)."""
    return (Op(Lane.COMPUTE, Kind.OPTIMIZER, "grad_norm", OpClass.OPTIMIZER,
               bytes=NORM_READ_BYTES_PER_PARAM * params_local),)


def norm_allreduce_ops(plan: ParallelPlan) -> tuple[Op, ...]:
    """The squared norm's all-reduce (the host's ``.item()`` is the optimizer task's first op,
    :func:`norm_read_op`)."""
    return (collective_op(Lane.DP, Collective.ALL_REDUCE, "grad_norm.allreduce", bytes=GRAD_NORM_BYTES,
                          dim=norm_group(plan)),)


def norm_read_op() -> Op:
    """``total_norm.item()``: the host waits for the all-reduce, then issues the update."""
    return host_sync_op(Kind.OPTIMIZER, "grad_norm.item")
