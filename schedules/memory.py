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
"""

from __future__ import annotations

from dataclasses import dataclass

from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo

BF16_BYTES = 2
ADAM_STATE_BYTES = 12  # fp32 master weights + momentum + variance


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
    return plan.grad_reduce_bytes if plan.framework == "megatron" else plan.element_bytes


def model_state_bytes(num_params: float, zero_stage: int, shard_ranks: int,
                      grad_bytes: float = BF16_BYTES) -> ModelStateBytes:
    """Model-state bytes per GPU for ``num_params`` parameters held by this GPU before sharding.

    ZeRO paper, Figure 1, with K = 12: stage 0 = 16Ψ, stage 1 = 4Ψ + 12Ψ/N,
    stage 2 = 2Ψ + 14Ψ/N, stage 3 = 16Ψ/N, where N = ``shard_ranks`` (the data-parallel degree).
    ``grad_bytes`` per gradient: 4 where gradients are accumulated and reduced in fp32 (Megatron's
    bf16 default: its distributed-optimizer doc counts 18 bytes/param, or 6 + 12/N, for "bf16
    param, fp32 grads"), else the ZeRO paper's 2.
    """
    n = shard_ranks
    params = BF16_BYTES * num_params / (n if zero_stage >= 3 else 1)
    grads = grad_bytes * num_params / (n if zero_stage >= 2 else 1)
    optimizer = ADAM_STATE_BYTES * num_params / (n if zero_stage >= 1 else 1)
    return ModelStateBytes(params=params, grads=grads, optimizer=optimizer)


@dataclass(frozen=True, kw_only=True)
class ActivationConfig:
    """How activations are kept: tensor/context parallel split, SP, recomputation, attention kernel."""

    tp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    flash_attention: bool = False


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
    mask = 1 if model.dropout else 0
    replicated = (
        2 * sbh  # input of the first norm
        + 2 * sbh  # QKV matmul input
        + mask * sbh  # dropout mask after the attention projection
        + 2 * sbh  # input of the second norm
        + 2 * sbh  # first MLP matmul input
        + mask * sbh  # dropout mask after the MLP
    )
    mlp_inner = 6 * s * b * f if model.ffn_kind == "swiglu" else (2 + 2) * s * b * f
    split = (
        2 * sbh  # Q
        + 2 * 2 * s * b * kv  # K and V
        + 2 * sbh  # attention context (output-projection input)
        + mlp_inner  # GeLU input + output, or SwiGLU gate/up outputs + down-projection input
    )
    core = _attention_core_bytes(model, s, b, cfg)
    return replicated / sp_div + (split + core) / cfg.tp


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
    """Extra activation bytes on the last stage: final-norm input and fp32 logits (vocab-parallel)."""
    sb = model.seq_len / cfg.cp * microbatch_size
    sp_div = cfg.tp if cfg.sequence_parallel else 1
    return 2 * sb * model.hidden_size / sp_div + 4 * sb * model.vocab_size / cfg.tp


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
                            recompute=plan.recompute, flash_attention=plan.flash_attention)


def stored_layer_bytes(model: ModelSpec, plan: ParallelPlan, layer: int) -> float:
    """Activations one micro-batch leaves from block ``layer``'s forward (bytes per GPU)."""
    cfg = plan_activation_config(plan)
    if model.moe is not None:  # layers differ (schedules.moe_memory imports this module)
        from schedules.moe_memory import moe_layer_activation_bytes
        return moe_layer_activation_bytes(model, plan, layer, cfg)
    return layer_activation_bytes(model, plan.microbatch_size, cfg)


def stage_layer_activation_bytes(model: ModelSpec, plan: ParallelPlan, stage: StageInfo) -> float:
    """The blocks' share of :func:`stage_activation_bytes` (without the embedding's and head's)."""
    if model.moe is None:
        return len(stage.layers) * stored_layer_bytes(model, plan, 0)
    return sum(stored_layer_bytes(model, plan, i) for i in stage.layers)


def stage_activation_bytes(model: ModelSpec, plan: ParallelPlan, stage: StageInfo) -> float:
    """Activations one micro-batch leaves on a virtual stage after its forward (bytes per GPU)."""
    cfg, mbs = plan_activation_config(plan), plan.microbatch_size
    total = stage_layer_activation_bytes(model, plan, stage)
    if stage.first:
        total += embedding_activation_bytes(model, mbs, cfg)
    if stage.last:
        total += head_activation_bytes(model, mbs, cfg)
    return total


@dataclass(frozen=True, kw_only=True)
class HostStateBytes:
    """Model-state bytes one GPU's rank keeps off the GPU: in CPU DRAM and on NVMe."""

    dram: float
    nvme: float


def offloaded_state_bytes(num_params: float, zero_stage: int, shard_ranks: int, offload: str,
                          device: str, grad_bytes: float = BF16_BYTES) -> tuple[ModelStateBytes, HostStateBytes]:
    """(HBM, host) model-state bytes per GPU under ZeRO-Offload / ZeRO-Infinity.

    ZeRO-Offload (Ren et al. 2021, §4): the GPU keeps the bf16 parameters and gradients
    (2 + 2 bytes/param, sharded per ZeRO stage); the fp32 optimizer states (12 bytes/param of
    the rank's shard) and the offloaded bf16 gradient shard (2) live on the host. ZeRO-Infinity
    parameter offload (ZeRO-3) also moves the bf16 parameter shard (2) to the host. With
    ``device="nvme"`` the optimizer states (and offloaded parameters) sit on NVMe, the gradient
    shard in DRAM. ``offload="none"`` is :func:`model_state_bytes` with nothing on the host
    (``grad_bytes`` as there).
    """
    gpu = model_state_bytes(num_params, zero_stage, shard_ranks, grad_bytes)
    if offload == "none":
        return gpu, HostStateBytes(dram=0.0, nvme=0.0)
    shard = num_params / shard_ranks
    params_host = BF16_BYTES * shard if offload == "params" else 0.0
    hbm = ModelStateBytes(params=0.0 if offload == "params" else gpu.params, grads=gpu.grads, optimizer=0.0)
    to_tier = ADAM_STATE_BYTES * shard + params_host
    grads_host = grad_bytes * shard
    if device == "nvme":
        return hbm, HostStateBytes(dram=grads_host, nvme=to_tier)
    return hbm, HostStateBytes(dram=grads_host + to_tier, nvme=0.0)
