"""Work outside the transformer blocks: the embedding (first stage), the output head and loss
(last stage), pipeline sends, and the optimizer step."""

from __future__ import annotations

from core.groups import TP
from core.taskgraph import Op, collective_op
from core.vocab import Collective, Kind, Lane, Offload, OpClass, Runtime
from schedules.flops import logits_flops
from schedules.model import ModelSpec
from schedules.optimizer_traffic import (
    GRAD_BUFFER_ZERO_BYTES,
    ClipKind,
    OptimizerKernel,
    clip_bytes_per_param,
    optimizer_bytes_per_param,
)
from schedules.plan import ParallelPlan
from schedules.step_end_syncs import NORM_READ_BYTES_PER_PARAM, separate_norm

# torch.optim.AdamW on tensors without a foreach/fused kernel (CPU): the single-tensor loop, per
# parameter tensor: exp_avg.lerp_(grad) 3 passes, exp_avg_sq.mul_ 2, .addcmul_(grad, grad) 3,
# denom = sqrt / bias correction + eps 2 + 2 + 2, param.addcdiv_(exp_avg, denom) 4 (no weight
# decay): 18 passes over the parameter's elements (all in the parameter's dtype).
EAGER_ADAMW_PASSES = 18


# Passes over the fp32 logits (in units of their fp32 size; a bf16 read or write counts 0.5) of
# the loss. Megatron's unfused vocab-parallel cross-entropy (megatron/core/tensor_parallel/
# cross_entropy.py @core_r0.8.0, cross_entropy_loss_fusion off by default; Megatron-LM 2021 and
# Megatron-DeepSpeed run the same mpu code): forward .float() of the bf16 logits 1.5, max 1,
# in-place subtract 2, in-place exp 2, sum 1, in-place divide 2 = 9.5; backward grad.mul_ 2 and
# .float()'s backward (fp32 -> bf16) 1.5 = 3.5.
MEGATRON_LOSS_PASSES = (9.5, 3.5)
# torch's F.cross_entropy(logits.float(), labels) (torchtitan, the included trainer), the aten ops
# autograd runs (counted in tests/schedules/test_torch_loss_passes.py): forward _log_softmax
# (read, write) 2 and nll_loss_forward (a gather of one logit per token, ~0); backward
# nll_loss_backward (a zero-filled gradient, then a scatter) 1 and _log_softmax_backward_data
# (reads the gradient and the output, writes) 3; plus the upcast of the bf16 logits, _to_copy and
# its backward, 1.5 each: (3.5, 5.5) on 16-bit activations.
TORCH_LOG_SOFTMAX_PASSES = (2.0, 4.0)
TORCH_COMPUTE_LOSS_PASSES = (3.0, 2.0)
"""loss_dtype "compute" (llm-foundry's fused Triton cross-entropy, NeMo AutoModel's unfused one on
bf16 logits): in units of the bf16 logits; not counted per kernel (an estimate). Also fp32
activations (the included trainer's CPU runs), where exp and log make the forward compute-bound
rather than memory-bound: the effective count the trainer's traces check
(tests/profiler/test_calibrate_op_classes.py: measured backward/forward activation work 1.69)."""


def loss_passes(plan: ParallelPlan) -> tuple[float, float]:
    """(forward, backward) passes of the loss over the logits in the loss's dtype
    (``plan.loss_element_bytes``; see the constants above)."""
    if plan.framework == Runtime.MEGATRON:
        return MEGATRON_LOSS_PASSES
    if plan.loss_dtype != "fp32" or plan.element_bytes >= plan.loss_element_bytes:
        return TORCH_COMPUTE_LOSS_PASSES
    fwd, bwd = TORCH_LOG_SOFTMAX_PASSES
    upcast = (plan.element_bytes + plan.loss_element_bytes) / plan.loss_element_bytes
    return fwd + upcast, bwd + upcast


def _tokens(model: ModelSpec, plan: ParallelPlan) -> float:
    return plan.microbatch_size * model.seq_len / plan.cp


def embedding_ops(model: ModelSpec, plan: ParallelPlan, backward: bool) -> tuple[Op, ...]:
    """Vocab-parallel embedding lookup (or its gradient) and the TP reduction of its output."""
    hidden_bytes = plan.element_bytes * _tokens(model, plan) * model.hidden_size
    kind = Kind.BWD if backward else Kind.FWD
    ops: tuple[Op, ...] = (Op(Lane.COMPUTE, kind, "embedding" + (".grad" if backward else ""), OpClass.ACTIVATION,
                              bytes=2 * hidden_bytes),)
    if plan.tp > 1 and not backward:
        coll = Collective.REDUCE_SCATTER if plan.sequence_parallel else Collective.ALL_REDUCE
        ops += (collective_op(Lane.TP, coll, "embedding.tp", bytes=hidden_bytes, dim=TP),)
    return ops


def head_ops(model: ModelSpec, plan: ParallelPlan, backward: bool) -> tuple[Op, ...]:
    """Final norm, vocab-parallel output projection and cross-entropy (forward or backward)."""
    tokens = _tokens(model, plan)
    hidden_bytes = plan.element_bytes * tokens * model.hidden_size
    logits_bytes = plan.loss_element_bytes * tokens * model.vocab_size / plan.tp  # the loss's logits
    gemm = logits_flops(model, plan.microbatch_size) / (plan.tp * plan.cp)
    t, h, v = round(tokens), model.hidden_size, round(model.vocab_size / plan.tp)
    if not backward:
        ops: tuple[Op, ...] = ()
        if plan.tp > 1 and plan.sequence_parallel:
            ops += (Op(Lane.TP, Kind.ALL_GATHER, "head.sp_ag", OpClass.ALL_GATHER, bytes=hidden_bytes, dim=TP),)
        return ops + (
            Op(Lane.COMPUTE, Kind.FWD, "head.logits", OpClass.GEMM, flops=gemm, m=t, n=v, k=h),
            Op(Lane.COMPUTE, Kind.FWD, "head.loss", OpClass.ACTIVATION, bytes=loss_passes(plan)[0] * logits_bytes),
        )
    ops = (
        Op(Lane.COMPUTE, Kind.BWD, "head.loss.grad", OpClass.ACTIVATION, bytes=loss_passes(plan)[1] * logits_bytes),
        Op(Lane.COMPUTE, Kind.BWD, "head.logits.dgrad", OpClass.GEMM, flops=gemm, m=t, n=h, k=v),
        Op(Lane.COMPUTE, Kind.BWD, "head.logits.wgrad", OpClass.GEMM, flops=gemm, m=h, n=v, k=t),
    )
    if plan.tp > 1:
        coll = Collective.REDUCE_SCATTER if plan.sequence_parallel else Collective.ALL_REDUCE
        ops += (collective_op(Lane.TP, coll, "head.tp", bytes=hidden_bytes, dim=TP),)
    return ops


def activation_message_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Bytes of one pipeline send (activation or its gradient) between stages, per TP rank.

    The hidden state [s/cp, b, h] in the plan's dtype; with sequence parallelism each TP rank
    sends its 1/tp sequence shard, and with Megatron-LM's scatter/gather
    (``plan.scatter_gather_p2p``) 1/tp of the whole, which the receiver all-gathers
    (:func:`full_message_bytes`).
    """
    full = full_message_bytes(model, plan)
    return full / plan.tp if plan.sequence_parallel or plan.scatter_gather_p2p else full


def full_message_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Bytes of a whole pipeline message: the hidden state [s/cp, b, h] in the plan's dtype."""
    return plan.element_bytes * _tokens(model, plan) * model.hidden_size


def adam_bytes_per_param(plan: ParallelPlan, host_loop: bool = False) -> float:
    """Memory traffic of one parameter's optimizer step with gradient-norm clipping (bytes), per
    :mod:`schedules.optimizer_traffic`: Megatron's fused Adam with its main-to-model copy, torch's
    fused or foreach AdamW (``plan.optimizer``), plus the clip's norm (and, for torch, its
    always-applied scaling). ``host_loop``: the included trainer on CPUs, whose AdamW falls back
    to the single-tensor loop (:data:`EAGER_ADAMW_PASSES` over the plan's elements) and which
    does not clip."""
    if host_loop:
        return EAGER_ADAMW_PASSES * plan.element_bytes
    if plan.fused_optimizer and plan.framework == Runtime.MEGATRON:
        return optimizer_bytes_per_param(OptimizerKernel.MEGATRON_FUSED_ADAM) + clip_bytes_per_param(
            ClipKind.MEGATRON, clipped=False)
    kernel = OptimizerKernel.TORCH_FUSED_ADAMW if plan.fused_optimizer else OptimizerKernel.TORCH_FOREACH_ADAMW
    traffic = optimizer_bytes_per_param(kernel) + clip_bytes_per_param(ClipKind.TORCH)
    # without master weights every tensor the step reads and writes (parameter, gradient, both
    # states) is in the compute dtype instead of fp32: the same passes over half the bytes in bf16
    return traffic if plan.master_weights else traffic * plan.element_bytes / 4


def zeroes_grad_buffer(plan: ParallelPlan) -> bool:
    """Does each step zero a contiguous fp32 gradient buffer
    (:data:`schedules.optimizer_traffic.GRAD_BUFFER_ZERO_BYTES`)? On the megatron runtime when
    gradients accumulate into one (Megatron-LM's fused ``main_grad`` buffer, DeepSpeed
    BF16_Optimizer's fp32 copies) and the step runs on the GPU; not with autograd's accumulation
    (gradients set to None) or an offloaded step. The buffer holds every local parameter under
    ZeRO <= 2 and the rank's shard under ZeRO-3 (:func:`grad_buffer_params`)."""
    return (plan.framework == Runtime.MEGATRON and plan.grad_accumulation_kind in ("fused", "fp32-copy")
            and plan.offload == Offload.NONE)


def grad_buffer_params(plan: ParallelPlan, params_local: float, shard: int) -> float:
    """Parameters in a rank's gradient buffer out of its ``params_local`` (unsharded): all of them
    under ZeRO <= 2 (the distributed optimizer reduce-scatters into a full-size buffer), 1/``shard``
    under ZeRO-3 (partitioned gradients)."""
    return params_local / shard if plan.zero >= 3 else params_local


def optimizer_ops(plan: ParallelPlan, params_local: float, buffer_params: float) -> tuple[Op, ...]:
    """Adam step over ``params_local`` parameters (the rank's shard), then the zeroing of the
    gradient buffer of its ``buffer_params`` local parameters (unsharded) when the runtime keeps
    one (:func:`zeroes_grad_buffer`; Megatron-LM zeroes it at the next iteration's start, the
    next op on the same stream); both memory-bound."""
    per_param = adam_bytes_per_param(plan)
    if separate_norm(plan):
        per_param -= NORM_READ_BYTES_PER_PARAM  # its own task, before the norm's all-reduce
    step = Op(Lane.COMPUTE, Kind.OPTIMIZER, "optimizer.step", OpClass.OPTIMIZER, bytes=per_param * params_local)
    if not zeroes_grad_buffer(plan) or buffer_params <= 0:
        return (step,)
    return step, Op(Lane.COMPUTE, Kind.OPTIMIZER, "grad_buffer.zero", OpClass.OPTIMIZER,
                    bytes=GRAD_BUFFER_ZERO_BYTES * buffer_params)
