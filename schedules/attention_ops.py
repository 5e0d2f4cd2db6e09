"""One block's shape for a model whose attention is not ModelSpec's h/heads-wide heads (Qwen3's
128-wide heads, GPT-OSS, DeepSeek's MLA) or whose layers differ (MoE): the per-layer
:class:`schedules.layer_ops.LayerShape` the work of :mod:`schedules.work` builds its ops from.

Projections come from :mod:`schedules.attention`'s weight shapes. Under TP, each head-wide
projection (Q, K, V, MLA's up-projections, the output) splits its heads over the TP ranks;
MLA's down-projections to the latents (h -> q_lora_rank, h -> kv_lora_rank + rope) are
replicated on every TP rank, as Megatron-Core's ``MLASelfAttention`` keeps them (duplicated
linears). A dense layer's MLP is the dense model's; an MoE layer's feed-forward part is
:class:`schedules.moe_ops.MoEShape`.
"""

from __future__ import annotations

from schedules.attention import AttentionSpec, attention_core_flops, projection_shapes
from schedules.elementwise import elementwise_passes, strided_passes
from schedules.layer_ops import (
    DenseFFN,
    LayerShape,
    Matmul,
    elementwise_bytes,
    elementwise_strided_bytes,
    softmax_bytes,
)
from schedules.model import ModelSpec
from schedules.moe import attention_of, is_moe_layer
from schedules.moe_sizes import moe_shape
from schedules.plan import ParallelPlan
from schedules.plan.runtime import FUSED_PROJECTIONS


def _projections(model: ModelSpec, plan: ParallelPlan, spec: AttentionSpec, t: int) -> tuple[tuple[Matmul, ...], Matmul]:
    """The attention's input matmuls and its output projection on one (tp, cp) rank."""
    tp = plan.tp
    shapes = projection_shapes(spec, model.hidden_size, model.num_heads, model.kv_heads)
    *inputs, (o_in, o_out) = shapes
    out = Matmul(name="proj", m=t, n=o_out, k=round(o_in / tp), flops=2.0 * t * o_out * o_in / tp)
    if spec.is_mla:
        names = ["q_down", "q_up", "kv_down", "kv_up"] if spec.q_lora_rank else ["q", "kv_down", "kv_up"]
        mms = []
        for name, (n_in, n_out) in zip(names, inputs, strict=True):
            split = 1 if name.endswith("_down") else tp  # latent down-projections are replicated
            mms.append(Matmul(name=name, m=t, n=round(n_out / split), k=n_in, flops=2.0 * t * n_in * n_out / split))
        return tuple(mms), out
    widths = [n_out / (tp if i == 0 or model.kv_heads >= tp else model.kv_heads)
              for i, (_, n_out) in enumerate(inputs)]
    h = model.hidden_size
    if FUSED_PROJECTIONS[plan.framework]:
        n = sum(widths)
        return (Matmul(name="qkv", m=t, n=round(n), k=h, flops=2.0 * t * h * n, normed_input=True),), out
    return tuple(Matmul(name=name, m=t, n=round(w), k=h, flops=2.0 * t * h * w, normed_input=True)
                 for name, w in zip(("q", "k", "v"), widths, strict=True)), out


def _mlp(model: ModelSpec, plan: ParallelPlan, t: int, ffn: int) -> tuple[tuple[Matmul, ...], Matmul]:
    """A dense MLP of inner width ``ffn`` on one TP rank."""
    h, tp = model.hidden_size, plan.tp
    up = model.ffn_inputs
    f_n = ffn / tp
    if FUSED_PROJECTIONS[plan.framework]:
        fc1: tuple[Matmul, ...] = (Matmul(name="fc1", m=t, n=round(up * f_n), k=h, flops=2.0 * t * h * up * f_n,
                                          normed_input=True),)
    else:
        fc1 = tuple(Matmul(name=name, m=t, n=round(f_n), k=h, flops=2.0 * t * h * f_n, normed_input=True)
                    for name in ("w1", "w3")[:up])
    return fc1, Matmul(name="fc2", m=t, n=h, k=round(f_n), flops=2.0 * t * h * f_n)


def model_layer_shape(model: ModelSpec, plan: ParallelPlan, layer: int) -> LayerShape:
    """Block ``layer`` of an MoE model (or one with its own attention geometry) for one
    micro-batch on one (tp, cp, ep) rank."""
    spec = attention_of(model)
    tokens = plan.microbatch_size * model.seq_len / plan.cp
    t, tp, element = round(tokens), plan.tp, plan.element_bytes
    qkv, out = _projections(model, plan, spec, t)
    causal_share = 0.5 if (model.causal and plan.flash_attention) else 1.0
    moe_layer = is_moe_layer(model, layer)
    ffn = moe_shape(model, plan, layer) if moe_layer else DenseFFN(*_mlp(model, plan, t, model.ffn))
    kv_heads_local = max(1, model.kv_heads // tp) if not spec.is_mla else model.num_heads / tp
    passes = elementwise_passes(plan)[model.ffn_kind]
    dense_act = element * tokens * model.ffn / tp if moe_layer else 0.0  # an MoE layer has no dense MLP

    def elementwise(backward: bool) -> float:
        return elementwise_bytes(model, plan, tokens, backward) - passes[1 if backward else 0] * dense_act

    def strided(backward: bool) -> float:
        act = strided_passes(plan).get(model.ffn_kind, (0.0, 0.0))[1 if backward else 0]
        return elementwise_strided_bytes(model, plan, tokens, backward) - act * dense_act

    return LayerShape(
        tokens_local=tokens, hidden_bytes=element * tokens * model.hidden_size,
        kv_block_bytes=element * tokens * kv_heads_local * (spec.head_dim + spec.v_dim), qkv=qkv, out=out,
        ffn=ffn,
        attention=attention_core_flops(model, spec, plan.microbatch_size * model.seq_len) / (tp * plan.cp)
        * causal_share,
        attention_batch=max(1, round(plan.microbatch_size * model.num_heads / tp)),
        seq_len=model.seq_len, head_dim=spec.head_dim,
        elementwise_bytes=elementwise(False), elementwise_bwd_bytes=elementwise(True),
        elementwise_strided_bytes=strided(False), elementwise_bwd_strided_bytes=strided(True),
        softmax_bytes=0.0 if plan.flash_attention else softmax_bytes(model, plan, tokens),
        attention_kernel=plan.attention_kernel, causal=causal_share < 1.0, cp=plan.cp,
    )
