"""Memory of an MoE model per GPU: expert model states sharded over the expert-data-parallel
group, and the activations an MoE layer (and an MLA/wide-head attention) stores for backward.

Expert states: a rank holds E/ep routed experts per MoE layer, each split over etp; the ZeRO
formulas of :func:`schedules.memory.model_state_bytes` apply to them with N = the EDP group
(tp x cp x dp / (ep x etp)) instead of the DP x CP group.

Activations per layer and micro-batch, in the accounting of :mod:`schedules.memory`
(Korthikanti et al. 2022: every tensor a backward reads, bf16, replicated tensors split by SP):

- attention: the two norm inputs and the projection input (replicated), Q, K, V and the
  context per head (TP-split; with MLA also the two latents, replicated), flash attention's
  fp32 log-sum-exp per head and row;
- a dense feed-forward: its input and inner tensors as a dense layer's;
- an MoE feed-forward, on the rank's T = s·b/sp tokens: the router input (h), its fp32 scores
  (E), the permuted tokens the experts read (T·top_k·load rows of h: the most loaded rank's),
  the experts' inner tensors (gate, up and down-projection input: 3 x ffn/etp per row with
  SwiGLU, 2 with GELU) over those rows times etp, their outputs (h per row, for the weighted
  combine), and the shared experts' as a dense MLP's;
- full recomputation keeps the block input only; Megatron-Core's ``--recompute-modules layernorm
  moe_act`` drops the experts' activation output and the pre-MLP norm's output.

Units: bytes.
"""

from __future__ import annotations

from schedules.memory import (
    ADAM_STATE_BYTES,
    BF16_BYTES,
    ActivationConfig,
    ModelStateBytes,
    gradient_buffer_bytes,
    model_state_bytes,
    optimizer_state_bytes,
)
from schedules.model import ModelSpec
from schedules.moe import attention_of, is_moe_layer, moe_of
from schedules.moe_sizes import routing_load
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo

__all__ = ["ADAM_STATE_BYTES", "BF16_BYTES", "expert_state_bytes", "moe_layer_activation_bytes"]


def expert_state_bytes(plan: ParallelPlan, stages: list[StageInfo]) -> ModelStateBytes:
    """Model-state bytes of a rank's routed experts on ``stages``, ZeRO-sharded over EDP."""
    params = sum(stage.expert_params_local for stage in stages)
    zero = plan.zero if plan.edp > 1 else 0
    return model_state_bytes(params, zero, plan.edp, gradient_buffer_bytes(plan), optimizer_state_bytes(plan))


def _inner(model: ModelSpec, rows: float, ffn: float) -> float:
    """Stored inner tensors of an MLP over ``rows`` rows of width ``ffn``."""
    return (6 if model.ffn_kind == "swiglu" else 4) * rows * ffn


def moe_layer_activation_bytes(model: ModelSpec, plan: ParallelPlan, layer: int, cfg: ActivationConfig) -> float:
    """Bytes one GPU stores for block ``layer``'s backward, for one micro-batch."""
    s = model.seq_len / cfg.cp
    b, h = plan.microbatch_size, model.hidden_size
    sbh, sb = s * b * h, s * b
    sp = cfg.tp if cfg.sequence_parallel else 1
    if cfg.recompute == "full":
        return 2 * sbh / sp
    spec = attention_of(model)
    heads = model.num_heads
    kv_heads = heads if spec.is_mla else model.kv_heads
    latents = 2 * sb * ((spec.q_lora_rank or 0) + (spec.kv_lora_rank or 0) + spec.qk_rope_head_dim)
    replicated = 3 * 2 * sbh + latents  # first norm input, projection input, second norm input
    split = 2 * sb * (heads * spec.head_dim + kv_heads * (spec.head_dim + spec.v_dim) + heads * spec.v_dim)
    core = 4 * heads * sb if cfg.flash_attention else (0.0 if cfg.recompute == "selective"
                                                       else 2 * heads * s * model.seq_len * b)
    total = replicated / sp + (split + core) / cfg.tp
    if not is_moe_layer(model, layer):
        return total + 2 * sbh / sp + _inner(model, sb, model.ffn) / cfg.tp
    moe = moe_of(model)
    tokens = sb / sp
    rows = tokens * moe.top_k * routing_load(model, plan) * plan.etp
    ffn = moe.expert_ffn_size / plan.etp
    # --recompute-modules layernorm moe_act: the activation's output (fc2's input) and the pre-MLP
    # norm's output (the router's and permutation's input) are recomputed, not stored
    modules = cfg.recompute == "selective" and plan.selective_recompute == "layernorm-moe-act"
    inner = _inner(model, rows, ffn) - (2 * rows * ffn if modules else 0.0)
    routed = 2 * rows * h + inner + 2 * rows * h
    shared = _inner(model, sb, moe.num_shared_experts * moe.shared_ffn) / cfg.tp
    router_input = 0.0 if modules else 2 * tokens * h
    return total + router_input + 4 * tokens * moe.num_experts + routed + shared

