"""HBM traffic of the optimizer step and of gradient-norm clipping, per parameter, per framework.

Each kernel pass reads or writes every element once; bytes per parameter = sum over passes of
(tensors read + tensors written) x element bytes. What each implementation runs (read in the
sources named; element sizes for bf16 training with fp32 master weights and Adam states):

- MEGATRON_FUSED_ADAM: Megatron-LM's Float16OptimizerWithFloat16Params / DistributedOptimizer
  over apex's FusedAdam (``multi_tensor_adam``): one pass reading the fp32 main grad, fp32 master
  weight, exp_avg, exp_avg_sq and writing weight, exp_avg, exp_avg_sq (7 x 4 = 28); then
  ``_copy_main_params_to_model_params`` reads the fp32 master and writes the bf16 model weight
  (4 + 2 = 6). 34 bytes, on the parameters the rank's optimizer updates (its 1/DP shard under
  the distributed optimizer).
- Gradient-buffer zeroing (:data:`GRAD_BUFFER_ZERO_BYTES`, :func:`schedules.stage_ops.zeroes_grad_buffer`):
  Megatron-LM's ``zero_grad_buffer`` at the start of every iteration writes the whole contiguous
  gradient buffer, ``grad_data.zero_()`` (core_v0.8.0 distributed/distributed_data_parallel.py
  l.274-283 -> param_and_grad_buffer.py ``reset`` l.503-508): one ``main_grad`` per local
  parameter, full size on every data-parallel rank (the distributed optimizer reduce-scatters into
  it in place), fp32 for bf16 (megatron/training/arguments.py @core_v0.8.0 l.304-305 forces
  ``accumulate_allreduce_grads_in_fp32``; ``grad_reduce_in_fp32``, training.py l.447).
  DeepSpeed's BF16_Optimizer does the same to its fp32 gradient copies, ``clear_hp_grads``
  (``fp32_groups_gradients_flat[i].zero_()``, a flat buffer of the whole bf16 group). 4 bytes per
  local parameter, unsharded.
- TORCH_FUSED_ADAMW: ``torch.optim.AdamW(fused=True)`` (``torch._fused_adamw_``): one pass over
  param, grad, exp_avg, exp_avg_sq (4 reads, 3 writes) = 28 bytes with fp32 params (FSDP2 keeps
  the sharded parameters in fp32 under bf16 mixed precision).
- TORCH_FOREACH_ADAMW: the default ``foreach`` AdamW (torch/optim/adam.py ``_multi_tensor_adam``,
  non-capturable path, read in torch 2.13): _foreach_mul_(params) for decoupled weight decay
  (r1 w1), _foreach_lerp_(exp_avgs, grads) (r2 w1), _foreach_mul_(exp_avg_sqs) (r1 w1),
  _foreach_addcmul_(exp_avg_sqs, grads, grads) (r3 w1), _foreach_sqrt (r1 w1), _foreach_div_
  (r1 w1), _foreach_add_(eps) (r1 w1), _foreach_addcdiv_(params, exp_avgs, denom) (r3 w1): 21
  passes x 4 = 84 bytes (76 without weight decay).
Gradient clipping (``clip_grad_norm``) reads every gradient for the norm, all-reduces one scalar,
then scales the gradients (read + write):
- torch.nn.utils.clip_grad_norm_ (torch/nn/utils/clip_grad.py): ``_foreach_norm`` then
  ``_foreach_mul_(grads, clip_coef_clamped)`` always ("avoids a `if clip_coef < 1:` conditional
  which can require a CPU <=> device synchronization"): 3 passes.
- Megatron-LM clip_grad_norm_fp32 (megatron/core/optimizer/clip_grads.py): ``multi_tensor_l2norm``,
  an all-reduce of the norm over the model-parallel group, ``total_norm.item()`` (a host
  synchronisation), and ``multi_tensor_scale`` only ``if clip_coeff < 1.0``: 1 pass, 3 if clipped.
Units: bytes per parameter.
"""

from __future__ import annotations

from enum import Enum

from core.errors import require_choice


class OptimizerKernel(str, Enum):
    """Which Adam implementation runs the step."""

    MEGATRON_FUSED_ADAM = "megatron-fused-adam"
    TORCH_FUSED_ADAMW = "torch-fused-adamw"
    TORCH_FOREACH_ADAMW = "torch-foreach-adamw"


class ClipKind(str, Enum):
    """Which gradient-norm clipping runs."""

    TORCH = "torch"
    MEGATRON = "megatron"


FP32, BF16 = 4, 2
# (tensors read, tensors written, element bytes) per pass
_PASSES: dict[OptimizerKernel, tuple[tuple[int, int, int], ...]] = {
    OptimizerKernel.MEGATRON_FUSED_ADAM: ((4, 3, FP32),  # multi_tensor_adam
                                          (1, 0, FP32), (0, 1, BF16)),  # main -> model params
    OptimizerKernel.TORCH_FUSED_ADAMW: ((4, 3, FP32),),
    OptimizerKernel.TORCH_FOREACH_ADAMW: ((1, 1, FP32), (2, 1, FP32), (1, 1, FP32), (3, 1, FP32),
                                          (1, 1, FP32), (1, 1, FP32), (1, 1, FP32), (3, 1, FP32)),
}
GRAD_BUFFER_ZERO_BYTES = FP32
"""HBM bytes per local parameter of zeroing a contiguous fp32 gradient buffer (one write)."""
CPU_ADAM_BYTES_PER_PARAM = 28
"""DRAM traffic of one parameter's CPU Adam update: fp32 master weight, momentum and variance read
and written (24 bytes), the bf16 gradient read (2) and the bf16 parameter written (2)."""
WEIGHT_DECAY_PASS = (1, 1, FP32)  # foreach AdamW's separate decoupled weight-decay pass


def optimizer_bytes_per_param(kernel: OptimizerKernel | str, weight_decay: bool = True) -> float:
    """HBM bytes the optimizer step moves per parameter (see the module docstring)."""
    kind = _kernel(kernel)
    passes = list(_PASSES[kind])
    if kind is OptimizerKernel.TORCH_FOREACH_ADAMW and not weight_decay:
        passes.remove(WEIGHT_DECAY_PASS)
    return float(sum((reads + writes) * size for reads, writes, size in passes))


def optimizer_kernels(kernel: OptimizerKernel | str, tensors: int) -> int:
    """Kernel launches of one step over ``tensors`` parameter tensors: one per pass for the
    multi-tensor and fused kernels (each covers a whole tensor list; chunking aside)."""
    return len(_PASSES[_kernel(kernel)]) if tensors > 0 else 0


def clip_bytes_per_param(kind: ClipKind | str, grad_bytes: int = FP32, clipped: bool = True) -> float:
    """HBM bytes gradient-norm clipping moves per parameter: the norm's read, plus the scaling's
    read and write when it runs (always for torch; Megatron only when the norm exceeds the max)."""
    require_choice("kind", kind, [k.value for k in ClipKind])
    scales = ClipKind(kind) is ClipKind.TORCH or clipped
    return float(grad_bytes * (3 if scales else 1))


def clip_host_syncs(kind: ClipKind | str) -> int:
    """Host-device synchronisations of one clip: Megatron's ``total_norm.item()``; torch none."""
    require_choice("kind", kind, [k.value for k in ClipKind])
    return 1 if ClipKind(kind) is ClipKind.MEGATRON else 0


def _kernel(kernel: OptimizerKernel | str) -> OptimizerKernel:
    require_choice("kernel", kernel, [k.value for k in OptimizerKernel])
    return OptimizerKernel(kernel)
