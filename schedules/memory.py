"""Per-GPU memory: model states under mixed precision + ZeRO, and activations per micro-batch.

Model states follow Rajbhandari et al. 2020 (ZeRO), mixed-precision Adam: 2 bytes of bf16 params,
2 of bf16 grads and 12 of fp32 optimizer state (master weights, momentum, variance) per parameter,
i.e. 16Ψ; ZeRO-1 shards the 12, ZeRO-2 also the grads, ZeRO-3 also the params, over N ranks.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", §4): per layer and micro-batch ``s·b·h·(34 + 5·a·s/h)`` bytes for a GPT layer with
dropout, split by tensor parallelism as ``10 + 24/t`` (+ the a·s² terms / t), and fully by ``t``
with sequence parallelism. We keep the paper's per-tensor accounting and generalize it to GQA
(K and V have kv_size columns), SwiGLU (gate and up outputs + the down-projection input: 6·s·b·f)
and models without dropout; flash attention (and selective recomputation) drop the a·s² terms.

torchtitan's per-op selective activation checkpointing (``selective_recompute="alternate-matmul"``)
stores a different set: the outputs of the ops its policy saves (every other matmul, the fused
attention kernel, TP reduce-scatters) and the block's input (:func:`alternate_matmul_stored_bytes`);
while one block's backward runs, its whole set is rematerialized on top of that
(:func:`recompute_working_bytes`). With torch's runtime the loss is ``F.cross_entropy`` on an fp32
copy of the logits, whose backward holds two more fp32 logit-sized tensors
(:func:`head_working_bytes`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.vocab import Offload, Runtime
from schedules.fp8 import FP8
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.plan.runtime import FUSED_PROJECTIONS

BF16_BYTES = 2
FP8_BYTES = 1
ADAM_STATE_BYTES = 12  # fp32 master weights + momentum + variance
FP32_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class ModelStateBytes:
    """Bytes of parameters, gradients and optimizer states held by one GPU."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        """Sum of the three parts in bytes."""
        return self.params + self.grads + self.optimizer


def gradient_buffer_bytes(plan: ParallelPlan) -> int:
    """Bytes per gradient held on the GPU: Megatron accumulates into a separate fp32 buffer when it
    reduces in fp32 (4; its docs count 18 bytes/param for "bf16 param, fp32 grads"); FSDP's fp32
    gradient shard takes the place of the bf16 one beside fp32 sharded parameters that are the
    master copy, so the ZeRO paper's 16 bytes/param hold there (the compute dtype's 2; 4 in the
    included trainer's fp32 CPU runs)."""
    return plan.grad_reduce_bytes if plan.framework == Runtime.MEGATRON else plan.element_bytes


def optimizer_state_bytes(plan: ParallelPlan) -> float:
    """Optimizer-state bytes per parameter: fp32 master weight, momentum and variance (12), or,
    without master weights (``plan.master_weights``), Adam's two states in the parameters' own
    compute dtype (2 x 2 in bf16; the parameters themselves are counted as parameters)."""
    return ADAM_STATE_BYTES if plan.master_weights else 2 * plan.element_bytes


def model_state_bytes(num_params: float, zero_stage: int, shard_ranks: int,
                      grad_bytes: float = BF16_BYTES, optimizer_bytes: float = ADAM_STATE_BYTES) -> ModelStateBytes:
    """Model-state bytes per GPU for ``num_params`` parameters held by this GPU before sharding.

    ZeRO paper, Figure 1, with K = 12: stage 0 = 16Ψ, stage 1 = 4Ψ + 12Ψ/N,
    stage 2 = 2Ψ + 14Ψ/N, stage 3 = 16Ψ/N, where N = ``shard_ranks`` (the data-parallel degree).
    ``grad_bytes`` per gradient: 4 where gradients are accumulated and reduced in fp32 (Megatron's
    bf16 default: its distributed-optimizer doc counts 18 bytes/param, or 6 + 12/N, for "bf16
    param, fp32 grads"), else the ZeRO paper's 2. ``optimizer_bytes`` per parameter: the paper's
    K = 12, or :func:`optimizer_state_bytes` of the plan.
    """
    n = shard_ranks
    params = BF16_BYTES * num_params / (n if zero_stage >= 3 else 1)
    grads = grad_bytes * num_params / (n if zero_stage >= 2 else 1)
    optimizer = optimizer_bytes * num_params / (n if zero_stage >= 1 else 1)
    return ModelStateBytes(params=params, grads=grads, optimizer=optimizer)


def fsdp_state_bytes(num_params: float, shard_ranks: int, storage_bytes: int = FP32_BYTES) -> ModelStateBytes:
    """Model-state bytes per GPU under PyTorch FSDP2 (``fully_shard``, framework="torch", ZeRO-3).

    The sharded parameters stay in their fp32 storage dtype and are the optimizer's copy (the
    ``MixedPrecisionPolicy(param_dtype=bf16)`` casts only the all-gathered ones: 4 bytes); the
    sharded gradients are fp32 (FSDP2's ``foreach_reduce`` casts the reduce-scatter output to the
    sharded parameter's dtype, torch/distributed/_composable/fsdp/_fsdp_collectives.py: 4);
    AdamW's ``exp_avg`` and ``exp_avg_sq`` are fp32 (8). 16/N in all, the ZeRO paper's stage-3
    total, split as FSDP2 holds it (the gradients are what ``zero_grad`` frees). Without master
    weights (``plan.master_weights``, ``storage_bytes`` 2) the parameters are stored in bf16, and
    the gradient shards and Adam's states follow them: 8/N.
    """
    n = shard_ranks
    return ModelStateBytes(params=storage_bytes * num_params / n, grads=storage_bytes * num_params / n,
                           optimizer=2 * storage_bytes * num_params / n)


@dataclass(frozen=True, kw_only=True)
class ActivationConfig:
    """How activations are kept: tensor/context parallel split, SP, recomputation, attention kernel,
    what selective recomputation keeps (``selective``: the plan's ``selective_recompute``) and
    whose runtime runs the block (``framework``: "megatron" fuses the q/k/v and the gate/up
    projections into one matmul each, "torch" does not; torch computes the loss on fp32 logits).
    ``matmul_input_bytes``: what a weight matmul keeps of its input for the weight gradient: 2
    (bf16), or 1 where Transformer Engine runs the matmul in FP8 and saves the FP8 cast instead
    (v1.8 ``linear.py`` l.289-298 ``saved_inputmat = inputmat`` / ``inputmat_t``;
    ``layernorm_linear.py`` and ``layernorm_mlp.py`` keep ``ln_out`` as uint8 when FP8 and the
    activation output ``gelu_out`` cast to FP8; their ``save_for_backward``)."""

    tp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    flash_attention: bool = False
    selective: str = "attention"  # attention | alternate-matmul | layernorm-moe-act
    framework: str = "megatron"  # megatron | torch
    loss_bytes: int = 4  # bytes per logit element of the loss's softmax (ParallelPlan.loss_element_bytes)
    matmul_input_bytes: int = 2  # bytes per element of a saved weight-matmul input (1: TE keeps its FP8 cast)


def layer_activation_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Bytes one GPU stores for one transformer block's backward, for one micro-batch.

    Each line is one stored tensor of Korthikanti et al. 2022, Fig. 4 / §4.1, in bf16 (2 bytes),
    dropout masks in 1 byte. ``replicated`` tensors are duplicated on every TP rank unless sequence
    parallelism shards them; ``split`` tensors are sharded across TP ranks.
    """
    s = model.seq_len / cfg.cp
    b, h, kv, f = microbatch_size, model.hidden_size, model.kv_size, model.ffn
    sbh = s * b * h
    sp_div = cfg.tp if cfg.sequence_parallel else 1
    if cfg.recompute == "full":
        return 2 * sbh / sp_div  # only the block input is kept
    if cfg.recompute == "selective" and cfg.selective == "alternate-matmul":
        return alternate_matmul_stored_bytes(model, microbatch_size, cfg)
    mask = 1 if model.dropout else 0
    mi = cfg.matmul_input_bytes
    replicated = (
        2 * sbh  # input of the first norm
        + mi * sbh  # QKV matmul input
        + mask * sbh  # dropout mask after the attention projection
        + 2 * sbh  # input of the second norm
        + mi * sbh  # first MLP matmul input
        + mask * sbh  # dropout mask after the MLP
    )
    mlp_inner = ((4 if model.ffn_kind == "swiglu" else 2) + mi) * s * b * f
    split = (
        2 * sbh  # Q
        + 2 * 2 * s * b * kv  # K and V
        + mi * sbh  # attention context (output-projection input)
        + mlp_inner  # GeLU input + output, or SwiGLU gate/up outputs + down-projection input
    )
    core = _attention_core_bytes(model, s, b, cfg)
    return replicated / sp_div + (split + core) / cfg.tp


def block_matmul_output_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> tuple[float, ...]:
    """Bytes of each weight matmul's output in one block's forward, in the order the block runs
    them, on one (TP, CP) rank (bf16): the attention's input projections (q, k, v apart, or one
    fused qkv: ``schedules.plan.runtime.FUSED_PROJECTIONS``), its output projection, the MLP's input
    projections (w1 then w3 for SwiGLU, as ``w2(silu(w1(x)) * w3(x))`` evaluates them, or one
    fused fc1) and fc2. Column-parallel outputs are split by TP; the two row-parallel ones
    (output projection, fc2) are full-width partial sums over all the rank's tokens."""
    t = model.seq_len / cfg.cp * microbatch_size
    h, kv, f, tp = model.hidden_size, model.kv_size, model.ffn, cfg.tp
    up = model.ffn_inputs
    qkv: tuple[float, ...]
    mlp_in: tuple[float, ...]
    if FUSED_PROJECTIONS[cfg.framework]:
        qkv, mlp_in = ((h + 2 * kv) / tp,), (up * f / tp,)
    else:
        qkv, mlp_in = (h / tp, kv / tp, kv / tp), (f / tp,) * up
    return tuple(BF16_BYTES * t * cols for cols in (*qkv, h, *mlp_in, h))


def alternate_matmul_stored_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Bytes one block keeps for its backward under torchtitan's per-op SAC, one micro-batch.

    torchtitan ``_apply_ac_to_transformer_block`` (torchtitan/parallelisms/parallelize_llama.py
    @ 9dec370, 2024-12; torchtitan/distributed/activation_checkpoint.py later, with the same
    alternation, aten.linear counted as a matmul too) wraps each block in
    ``checkpoint_wrapper`` with a policy that returns MUST_SAVE for the ops of ``_save_list``
    (aten.mm, the SDPA flash and memory-efficient kernels, c10d reduce_scatter_tensor; abs/max
    for float8 only) except every second aten.mm of the block, PREFER_RECOMPUTE otherwise.
    torch.utils.checkpoint's ``_CachingTorchDispatchMode`` keeps the outputs of the MUST_SAVE
    ops; the autograd graph holds nothing else, and the checkpoint keeps the block's input. So:

    - the block input: 2·s·b·h (sharded by TP with sequence parallelism);
    - the 1st, 3rd, ... matmul outputs of :func:`block_matmul_output_bytes` (Llama with q, k, v
      and w1, w3 apart: q, v, w1 and w2's output);
    - the fused attention kernel's outputs: the context (2·s·b·h/t) and its fp32 log-sum-exp
      per head and row (4·a·s·b/t); with unfused attention (no flash) nothing (its bmm and
      softmax are not in the list);
    - with TP and sequence parallelism, the two reduce-scatters' outputs (2·s·b·h/t each).

    The same set under torch.compile: the partitioner keeps MUST_SAVE nodes and recomputes
    PREFER_RECOMPUTE ones (torch/_functorch/partitioners.py ``must_recompute``).
    """
    s, b, h = model.seq_len / cfg.cp, microbatch_size, model.hidden_size
    sbh = s * b * h
    sp_div = cfg.tp if cfg.sequence_parallel else 1
    total = BF16_BYTES * sbh / sp_div + sum(block_matmul_output_bytes(model, microbatch_size, cfg)[0::2])
    if cfg.flash_attention:
        total += (BF16_BYTES * sbh + FP32_BYTES * model.num_heads * s * b) / cfg.tp
    if cfg.tp > 1 and cfg.sequence_parallel:
        total += 2 * BF16_BYTES * sbh / cfg.tp
    return total


def recompute_working_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Bytes live on top of the stored activations while one block's backward runs, one micro-batch.

    torchtitan's per-op SAC (``selective="alternate-matmul"``): torch.utils.checkpoint
    (non-reentrant) reruns the block's forward when the backward first unpacks a saved tensor and
    holds every tensor the block's backward reads until that backward consumes it; the SAC cache's
    tensors are handed over, not copied. The block's full set (:func:`layer_activation_bytes`
    without recomputation) is then live, of which the stored set is already counted: the
    difference, never below 0. Full recomputation: the full set (the block input is counted with
    it). Otherwise 0.
    """
    if cfg.recompute not in ("full", "selective") or (cfg.recompute == "selective" and cfg.selective != "alternate-matmul"):
        return 0.0
    full = layer_activation_bytes(model, microbatch_size, dataclasses.replace(cfg, recompute="none"))
    if cfg.recompute == "full":
        return full
    return max(0.0, full - alternate_matmul_stored_bytes(model, microbatch_size, cfg))


def _attention_core_bytes(model: ModelSpec, s: float, b: int, cfg: ActivationConfig) -> float:
    """The a·s² tensors (softmax output, dropout mask and output), or flash attention's statistics."""
    a = model.num_heads
    if cfg.flash_attention:
        return 4 * a * s * b  # fp32 log-sum-exp per row; the s x s tensors are never stored
    if cfg.recompute == "selective":
        return 0.0  # the s x s tensors are recomputed in backward (Korthikanti §5)
    per_head = 2 + (1 + 2 if model.dropout else 0)  # softmax out; dropout mask + output
    return per_head * a * s * model.seq_len * b


def embedding_activation_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Extra activation bytes on the first pipeline stage (embedding output and its dropout mask)."""
    sbh = model.seq_len / cfg.cp * microbatch_size * model.hidden_size
    sp_div = cfg.tp if cfg.sequence_parallel else 1
    return (2 + (1 if model.dropout else 0)) * sbh / sp_div


def head_activation_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Extra activation bytes on the last stage: final-norm input and the logits in the loss's
    dtype (fp32, or bf16 with ``loss_dtype="compute"``; vocab-parallel)."""
    sb = model.seq_len / cfg.cp * microbatch_size
    sp_div = cfg.tp if cfg.sequence_parallel else 1
    return 2 * sb * model.hidden_size / sp_div + cfg.loss_bytes * sb * model.vocab_size / cfg.tp


def head_working_bytes(model: ModelSpec, microbatch_size: int, cfg: ActivationConfig) -> float:
    """Bytes live on top of the stored head activations while the loss's backward runs (last stage).

    torch's runtime computes the loss as ``F.cross_entropy(logits.flatten(0, 1).float(), labels)``
    (torchtitan train.py ``loss_fn`` @ 9dec370; the included trainer's
    ``profiler/trainer/pipeline.py cross_entropy``): log_softmax on an fp32 copy, then nll_loss.
    The stored set (:func:`head_activation_bytes`) is log_softmax's fp32 output, which its
    backward reads (derivatives.yaml: ``_log_softmax_backward_data(grad, result, ...)``). In the
    backward, nll_loss's input gradient (a zeroed fp32 tensor of the logits' shape) and
    log_softmax's input gradient (fp32, same shape) are both live beside it: 2 x 4·s·b·V/t.
    The forward holds less on top of the stored set (the bf16 logits and the fp32 copy:
    6·s·b·V/t). Megatron's runtime: 0 (its fused vocab-parallel cross entropy is not modelled
    beyond the stored fp32 logits). With the loss in the compute dtype (``loss_dtype``: no
    ``.float()``) the same tensors are bf16: 2 x 2·s·b·V/t.
    """
    if cfg.framework != Runtime.TORCH:
        return 0.0
    sb = model.seq_len / cfg.cp * microbatch_size
    return 2 * cfg.loss_bytes * sb * model.vocab_size / cfg.tp


def weight_grad_retained_fraction(model: ModelSpec) -> float:
    """Share of a block's stored activations still needed after its input-gradient pass.

    A zero-bubble schedule defers the weight-gradient pass (W) after B; W needs the inputs of the
    weight matmuls, i.e. the QKV input, the attention context, the first MLP input and the
    down-projection input. Returned as a fraction of the block's activation bytes (no TP/SP).
    """
    s, b, h, f = model.seq_len, 1, model.hidden_size, model.ffn
    sbh = s * b * h
    down_in = 2 * s * b * f
    linear_inputs = 2 * sbh + 2 * sbh + 2 * sbh + down_in
    total = layer_activation_bytes(model, 1, ActivationConfig())
    return min(1.0, linear_inputs / total)


def plan_activation_config(plan: ParallelPlan) -> ActivationConfig:
    """The activation settings a plan implies."""
    return ActivationConfig(tp=plan.tp, cp=plan.cp, sequence_parallel=plan.sequence_parallel,
                            recompute=plan.recompute, flash_attention=plan.flash_attention,
                            selective=plan.selective_recompute, framework=plan.framework,
                            loss_bytes=plan.loss_element_bytes, matmul_input_bytes=saved_matmul_input_bytes(plan))


def saved_matmul_input_bytes(plan: ParallelPlan) -> int:
    """Bytes per element a weight matmul saves of its input (:class:`ActivationConfig`): 1 where
    Transformer Engine runs the block's matmuls in FP8 (the megatron runtime with dtype fp8: TE
    saves the FP8 cast), else 2. Every block counts as FP8 (the ``fp8_bf16_layers`` edge blocks
    keep bf16 inputs: not modelled); torchao's Float8Linear (the torch runtime) is left at 2."""
    return FP8_BYTES if plan.dtype == FP8 and plan.framework == Runtime.MEGATRON else BF16_BYTES


@dataclass(frozen=True, kw_only=True)
class HostStateBytes:
    """Model-state bytes one GPU's rank keeps off the GPU: in CPU DRAM and on NVMe."""

    dram: float
    nvme: float


def offloaded_state_bytes(num_params: float, zero_stage: int, shard_ranks: int, offload: str,
                          device: str, grad_bytes: float = BF16_BYTES,
                          optimizer_bytes: float = ADAM_STATE_BYTES) -> tuple[ModelStateBytes, HostStateBytes]:
    """(HBM, host) model-state bytes per GPU under ZeRO-Offload / ZeRO-Infinity.

    ZeRO-Offload (Ren et al. 2021, §4): the GPU keeps the bf16 parameters and gradients
    (2 + 2 bytes/param, sharded per ZeRO stage); the fp32 optimizer states (12 bytes/param of
    the rank's shard) and the offloaded bf16 gradient shard (2) live on the host. ZeRO-Infinity
    parameter offload (ZeRO-3) also moves the bf16 parameter shard (2) to the host. With
    ``device="nvme"`` the optimizer states (and offloaded parameters) sit on NVMe, the gradient
    shard in DRAM. ``offload="none"`` is :func:`model_state_bytes` with nothing on the host
    (``grad_bytes`` and ``optimizer_bytes`` as there).
    """
    gpu = model_state_bytes(num_params, zero_stage, shard_ranks, grad_bytes, optimizer_bytes)
    if offload == Offload.NONE:
        return gpu, HostStateBytes(dram=0.0, nvme=0.0)
    shard = num_params / shard_ranks
    params_host = BF16_BYTES * shard if offload == Offload.PARAMS else 0.0
    hbm = ModelStateBytes(params=0.0 if offload == Offload.PARAMS else gpu.params, grads=gpu.grads, optimizer=0.0)
    to_tier = ADAM_STATE_BYTES * shard + params_host
    grads_host = grad_bytes * shard
    if device == "nvme":
        return hbm, HostStateBytes(dram=grads_host, nvme=to_tier)
    return hbm, HostStateBytes(dram=grads_host + to_tier, nvme=0.0)
