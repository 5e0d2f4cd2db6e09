"""One MoE layer's feed-forward sizes on one rank for one micro-batch (:class:`MoEShape`): its
tokens and the most loaded rank's share of them, the expert groups, what the runtime and the
dispatcher add (host synchronisation, counts, sorting, eager RoPE and attention glue)."""

from __future__ import annotations

from core.groups import Axis, CommGroup, DeepEP
from core.vocab import Runtime
from schedules.elementwise import STRIDED_MAX_ELEMENT_BYTES, elementwise_passes
from schedules.layer_ops import Matmul
from schedules.model import ModelSpec
from schedules.moe import moe_of
from schedules.moe_kernels import (
    COUNT_BYTES,
    ROPE_PASSES,
    TORCH_FP32_ROPE_PASSES,
    flex_sink_glue_bytes,
    flex_sink_glue_strided_bytes,
    mla_glue_bytes,
    mla_glue_strided_bytes,
)
from schedules.moe_ops import MoEShape
from schedules.plan import ParallelPlan


def expert_dim(axis: Axis, plan: ParallelPlan, deepep: DeepEP | None = None) -> CommGroup:
    """The group of an expert-dimension collective (the pricer resolves it, :mod:`sim.placement`)."""
    return CommGroup.expert(axis, plan.ep, plan.etp, deepep)


def routing_load(model: ModelSpec, plan: ParallelPlan) -> float:
    """Tokens the most loaded EP rank receives, as a multiple of the even share:
    ``min(moe_imbalance, ep)``, capped by the capacity factor when the model sets one."""
    load = min(float(plan.moe_imbalance), float(plan.ep))
    cf = moe_of(model).capacity_factor
    return min(load, float(cf)) if cf is not None else load


def _deepep(model: ModelSpec, plan: ParallelPlan) -> DeepEP | None:
    """The EP all-to-all's DeepEP dispatch (its experts, top-k and routing), None without DeepEP."""
    moe = moe_of(model)
    if plan.moe_dispatcher != "deepep":
        return None
    return DeepEP(experts=moe.num_experts, top_k=moe.top_k, round_robin=moe.routing == "round-robin")


def moe_shape(model: ModelSpec, plan: ParallelPlan, layer: int) -> MoEShape:
    """One MoE layer's feed-forward sizes on one rank for one micro-batch."""
    moe = moe_of(model)
    h, element = model.hidden_size, plan.element_bytes
    t = plan.microbatch_size * model.seq_len / plan.cp  # the rank's tokens of the micro-batch
    sp = plan.tp if plan.tp > 1 and plan.sequence_parallel else 1
    tokens = max(1, round(t / sp))
    load = routing_load(model, plan)
    sent = tokens * moe.top_k * load
    up = model.ffn_inputs
    shared_ffn = moe.num_shared_experts * moe.shared_ffn
    fused = plan.framework == Runtime.MEGATRON
    tt = round(t)
    f_n = shared_ffn / plan.tp
    shared_fc1: tuple[Matmul, ...] = ()
    shared_fc2 = None
    if shared_ffn:
        shared_fc1 = ((Matmul(name="shared.fc1", m=tt, n=round(up * f_n), k=h, flops=2.0 * tt * h * up * f_n),)
                      if fused else tuple(Matmul(name=f"shared.{n}", m=tt, n=round(f_n), k=h,
                                                 flops=2.0 * tt * h * f_n) for n in ("w1", "w3")[:up]))
        shared_fc2 = Matmul(name="shared.fc2", m=tt, n=h, k=round(f_n), flops=2.0 * tt * h * f_n)
    passes = elementwise_passes(plan)[model.ffn_kind]
    rope = _rope_sizes(model, plan, t)
    return MoEShape(
        tokens=tokens, hidden=h, top_k=moe.top_k, num_experts=moe.num_experts,
        experts_local=moe.num_experts // plan.ep, load=load, expert_tokens=sent * plan.etp,
        expert_ffn=moe.expert_ffn_size // plan.etp, up=up, element=element,
        a2a_bytes=element * sent * h if plan.ep > 1 else 0.0,
        etp_bytes=element * sent * plan.etp * h if plan.etp > 1 else 0.0,
        router=Matmul(name="router", m=tokens, n=moe.num_experts, k=h, flops=2.0 * tokens * h * moe.num_experts,
                      quantizable=False),
        shared_fc1=shared_fc1, shared_fc2=shared_fc2, shared_act_bytes=element * t * f_n,
        act_passes=passes, ep_dim=expert_dim(Axis.EP, plan, _deepep(model, plan)),
        etp_dim=expert_dim(Axis.ETP, plan), fc2_bias=moe.expert_bias, clamp=moe.activation_clamp is not None,
        sort=(plan.framework == Runtime.MEGATRON and plan.moe_dispatcher == "alltoall"
              and moe.num_experts // plan.ep > 1),
        norm_passes=float(elementwise_passes(plan)[model.norm][0]),
        host_sync=_host_sync(plan),
        counts_bytes=(COUNT_BYTES * moe.num_experts * plan.ep
                      if plan.framework == Runtime.MEGATRON and plan.moe_dispatcher == "alltoall" and plan.ep > 1 else 0.0),
        rope_bytes=rope[0], rope_freq_bytes=rope[1] if plan.framework == Runtime.MEGATRON else 0.0,
        rope_passes=ROPE_PASSES if plan.framework == Runtime.MEGATRON else TORCH_FP32_ROPE_PASSES,
        strided=plan.framework == Runtime.MEGATRON and element <= STRIDED_MAX_ELEMENT_BYTES,
        attn_glue=_attn_glue(model, plan, t), attn_glue_strided=_attn_glue_strided(model, plan, t),
        shared_stream=_shared_stream(plan),
    )


def _attn_glue(model: ModelSpec, plan: ParallelPlan, tokens: float) -> tuple[float, float]:
    """(forward, backward) bytes of one micro-batch's eager attention glue on one rank, torch
    runtime only (module docstring); (0, 0) for other attention.

    - MLA (:func:`schedules.moe_kernels.mla_glue_bytes`), less the layer's RoPE estimate
      (:func:`schedules.layer_ops.elementwise_bytes`' ``rope`` passes), which it replaces. Source:
      NeMo AutoModel's ``MLA.forward`` (components/models/deepseek_v3/layers.py) and
      ``apply_rotary_emb`` (rope_utils.py: ``view_as_complex(x.float() ...)``, ``y.to(dtype)``) @
      01926a5c443b7979463c73341bf64adf79de638e; Transformer Engine v2.5 ``get_qkv_layout`` makes q,
      k and v contiguous when the value's strides match no layout
      (attention/dot_product_attention/utils.py).
    - Attention sinks (GPT-OSS), run through AutoModel's FlexAttention
      (:func:`schedules.moe_kernels.flex_sink_glue_bytes`): components/attention/utils.py
      ``preprocess_args_and_kwargs_for_attn``/``postprocess_output_for_attn`` (the "flex" branch)
      and components/attention/flex_attention.py ``FlexAttention.forward`` @ 01926a5c.
    """
    moe = moe_of(model)
    spec = moe.attention
    if plan.framework != Runtime.TORCH or spec is None:
        return 0.0, 0.0
    e, heads = plan.element_bytes, model.num_heads / plan.tp
    if spec.sinks:
        kv_heads = max(1, model.kv_heads // plan.tp)
        return flex_sink_glue_bytes(e, tokens * heads * spec.head_dim, tokens * kv_heads * spec.head_dim)
    if spec.kv_lora_rank is None:
        return 0.0, 0.0
    return _mla_glue(model, plan, tokens)


def _attn_glue_strided(model: ModelSpec, plan: ParallelPlan, tokens: float) -> tuple[float, float]:
    """Of :func:`_attn_glue`, the bytes of copies of strided 16-bit tensors (``Op.strided_bytes``):
    :func:`schedules.moe_kernels.flex_sink_glue_strided_bytes`, :func:`mla_glue_strided_bytes`."""
    spec = moe_of(model).attention
    glued = _attn_glue(model, plan, tokens)
    if spec is None or glued == (0.0, 0.0) or plan.element_bytes > STRIDED_MAX_ELEMENT_BYTES:
        return 0.0, 0.0
    e, heads = plan.element_bytes, model.num_heads / plan.tp
    if spec.sinks:
        kv_heads = max(1, model.kv_heads // plan.tp)
        strided = flex_sink_glue_strided_bytes(e, tokens * heads * spec.head_dim, tokens * kv_heads * spec.head_dim)
    else:
        per = mla_glue_strided_bytes(e, spec.v_dim)
        strided = (per[0] * tokens * heads, per[1] * tokens * heads)
    return min(strided[0], glued[0]), min(strided[1], glued[1])


def _mla_glue(model: ModelSpec, plan: ParallelPlan, tokens: float) -> tuple[float, float]:
    """:func:`_attn_glue` of MLA: its glue less the layer's RoPE estimate, which it replaces."""
    spec = moe_of(model).attention
    assert spec is not None
    e, heads = plan.element_bytes, model.num_heads / plan.tp
    per = mla_glue_bytes(e, spec.head_dim - spec.qk_rope_head_dim, spec.qk_rope_head_dim, spec.v_dim)
    passes = elementwise_passes(plan)["rope"]
    rope_heads = model.num_heads / plan.tp + max(1, model.kv_heads // plan.tp)
    return tuple(max(0.0, per[side] * tokens * heads - passes[side] * e * tokens * rope_heads * model.head_dim)
                 for side in (0, 1))  # type: ignore[return-value]


def _shared_stream(plan: ParallelPlan) -> bool:
    """Do the shared experts' forward kernels run beside the dispatch? NeMo AutoModel's
    ``MoE.forward`` (components/moe/layers.py @ 01926a5c443b7979463c73341bf64adf79de638e) issues
    them on ``_shared_experts_stream`` ("Execute shared experts in a separate stream to overlap
    compute with the communication for grouped experts") before the routed experts' DeepEP
    dispatch and waits for them before adding the two outputs: the torch runtime with DeepEP and
    EP. The dispatch op then runs beside the shared experts' kernels (``Op.concurrent``, the pair
    takes the longer of the two: :func:`sim.costing.layout_ops`); their backward stays in line."""
    return plan.framework == Runtime.TORCH and plan.moe_dispatcher == "deepep" and plan.ep > 1


def _host_sync(plan: ParallelPlan) -> bool:
    """Does each MoE forward wait on the host (module docstring)? Megatron-Core's all-to-all
    dispatcher (and DeepEP under it) on the megatron runtime, and DeepEP's normal dispatch on any
    runtime with EP: NeMo AutoModel's ``FusedDispatch.forward`` (components/moe/megatron/fused_a2a.py
    @ 01926a5c443b7979463c73341bf64adf79de638e) calls ``buffer.dispatch`` without a cached handle
    ("the CPU will wait for GPU's signal to arrive") in every forward and recomputed forward."""
    if plan.framework == Runtime.MEGATRON:
        return plan.moe_dispatcher == "alltoall" or plan.ep > 1
    return plan.moe_dispatcher == "deepep" and plan.ep > 1


def _rope_sizes(model: ModelSpec, plan: ParallelPlan, tokens: float) -> tuple[float, float]:
    """(query + key bytes, frequency bytes) of one micro-batch's unfused RoPE on one rank: the
    rank's heads (``heads / tp``) over the micro-batch's ``tokens`` (÷ cp); (0, 0) unless the model's
    RoPE is YaRN-scaled and the runtime is Megatron-Core's (module docstring) or another whose
    layers price a fused RoPE (``plan.fused_elementwise``) although its YaRN RoPE is eager: NeMo
    AutoModel's GPT-OSS attention calls ``apply_rotary_emb`` on q and k in eager PyTorch, in fp32
    (components/models/gpt_oss/layers.py and rope_utils.py @ 01926a5c443b7979463c73341bf64adf79de638e;
    :data:`TORCH_FP32_ROPE_PASSES`); with eager element-wise pricing the layer's RoPE passes already are the
    eager ones. Ordinary (not MLA) attention only."""
    moe = moe_of(model)
    spec = moe.attention
    unfused = plan.framework == Runtime.MEGATRON or plan.fused_elementwise  # the layer priced a fused RoPE
    if (moe.rope_scaling != "yarn" or not unfused or model.position_embedding != "rope"
            or (spec is not None and spec.kv_lora_rank is not None)):
        return 0.0, 0.0
    head_dim = spec.head_dim if spec is not None else model.hidden_size // model.num_heads
    heads = model.num_heads / plan.tp + max(1.0, model.kv_heads / plan.tp)
    return plan.element_bytes * tokens * heads * head_dim, 4.0 * tokens * head_dim
