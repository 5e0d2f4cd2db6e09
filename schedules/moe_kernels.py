"""Kernel-level facts of an MoE layer's work outside its GEMMs: the passes of its eager
element-wise ops, the eager attention glue of the torch runtime, the kernels the host issues
(:func:`forward_launches`) and the unfused RoPE (:mod:`schedules.moe_ops` builds the ops).

Element-wise work outside the grouped GEMMs and the fused activation, as Megatron-Core's
``TEGroupedMLP`` runs it (megatron/core/transformer/moe/experts.py and
megatron/core/fusions/fused_bias_geglu.py @ b0cc2706ddc60d2aefd5fff346445b5c013036a8, the
Megatron-LM of Megatron-Bridge v0.3.0), both memory-bound passes over the expert rows:

- ``experts.fc2_bias`` (``expert_bias``): fc2 is built with ``skip_bias_add=True`` and
  ``_apply_bias`` adds each expert's bias weighted by the routing probability in eager PyTorch,
  per expert: ``torch.cat([t + b * p for ...])`` (:data:`FC2_BIAS_PASSES`);
- ``experts.act_clamp`` (``activation_clamp``): ``weighted_bias_quick_geglu_impl`` clamps the
  two halves of the fc1 output and concatenates them in eager PyTorch before its fused kernel
  (:data:`CLAMP_PASSES`).

- ``experts.sort`` / ``experts.unsort`` (all-to-all dispatcher, more than one local expert, the
  megatron runtime): the received tokens arrive grouped by source rank and are re-ordered by
  local expert (``dispatch_postprocess``'s "Permutation 2", ``sort_chunks_by_idxs``) and back
  before the combine (``combine_preprocess``'s "Unpermutation 2", token_dispatcher.py @
  b0cc2706): one read and one write of the received rows each way, the same backward.

NeMo AutoModel's GPT-OSS experts (nemo_automodel/components/moe/layers.py @ 01926a5c,
``GroupedExpertsDeepEP``) run the same ``_apply_bias`` for fc2 and fuse the clamp into a compiled
activation but add the fc1 bias with the same eager ``_apply_bias`` (4 passes over the fc1
output, as the clamp's): the same traffic. Their GPU time is one op's; their launches (2 per
local expert forward) count in the host-synchronisation interval (:data:`LAUNCHES`).

Eager attention glue (the torch runtime): NeMo AutoModel's DeepSeek-V3 attention
(components/models/deepseek_v3/layers.py ``MLA.forward`` @ 01926a5c) splits q and kv_b's output,
applies RoPE to q_pe and k_pe as fp32 complex products, concatenates q and k with ``torch.cat`` and
hands Transformer Engine a strided value it copies (:func:`mla_glue_bytes`, in place of the layer's
RoPE estimate); its GPT-OSS attention transposes q, k, v and the output for FlexAttention and
rescales the output by the sinks in fp32 (:func:`flex_sink_glue_bytes`). One op after the
projections (``attn.glue``), its gradient before theirs. MoE layers only (DeepSeek-V3's dense first
layers keep the estimate).

Host synchronisation (:mod:`sim.host_sync`): Megatron-Core's all-to-all dispatcher copies the
per-expert token counts to the host and waits for them before the dispatch, and DeepEP's normal
dispatch waits for its received counts, once per forward (and recomputed forward) of each MoE
layer on the megatron runtime: a ``host_sync`` op (lane ``host``, ``batch`` = local experts) after
the permutation, priced by the pricer as the GPU's wait for the host in the interval after it.
Before it, the all-to-all dispatcher's ``preprocess`` all-gathers the per-expert counts over the
EP group (``gather_from_sequence_parallel_region(num_local_tokens_per_expert,
group=tp_ep_group)``, token_dispatcher.py @ b0cc2706: ``E`` int64 per rank; the TP part of that
group is left out) and reduces them (:data:`COUNT_KERNELS`). :func:`forward_launches` counts the
kernels the host issues per op (:data:`LAUNCHES`).

Unfused YaRN RoPE (``MoESpec.rope_scaling = "yarn"``, the megatron runtime): Megatron-Bridge
turns ``apply_rope_fusion`` off for every ``position_embedding_type`` but "rope"
(src/megatron/bridge/models/gpt_provider.py and utils/fusions.py
``validate_rope_fusion_compatibility`` @ 21b02e0c, v0.3.0; GPT-OSS's provider sets "yarn"), so
Megatron-Core applies the rotary embedding to the queries and to the keys in eager PyTorch
(megatron/core/models/common/embeddings/rope_utils.py ``_apply_rotary_pos_emb_bshd`` @
b0cc2706), 12 kernels each: cos and sin of the fp32 frequencies, each scaled by ``mscale`` and
cast (6 over the frequencies), then ``t * cos``, the rotated half's negation and
concatenation, ``* sin``, the sum and the concatenation with the (empty) pass-through part
(:data:`ROPE_PASSES` over the tensor). One op after the QKV projection (``attn.rope``), its
gradient before the QKV's (:meth:`schedules.moe_ops.MoEShape.rope`).
"""

from __future__ import annotations

ROUTER_SCORE_BYTES = 4  # fp32 router logits and probabilities
ROUTER_PASSES = 4  # logits read, softmax written, top-k read, the chosen scores written (fwd)
# Passes over the fc2 output (rows x h) of Megatron-Core's eager per-expert bias add, t + b * p:
# forward b * p written (1), t + b·p two read and one written (3), torch.cat read and written (2);
# backward the multiply's two gradients each written and read back by a reduction (g·p summed over
# rows for b, g·b over h for p: 3 + 3) and torch.split's backward concatenating the slices' (2).
FC2_BIAS_PASSES = (6.0, 8.0)
# Passes over the fc1 output (rows x up·f) of the eager clamp before the fused activation: forward
# two clamps each reading and writing a half (2) and torch.cat reading and writing the whole (2);
# backward chunk's gradient concatenated (2) and each clamp's gradient reading the gradient and
# its input and writing one (3).
CLAMP_PASSES = (4.0, 5.0)
# Of those, the kernels reading a ``torch.chunk`` half (strided; megatron/core/fusions/
# fused_bias_geglu.py @ b0cc2706 ``weighted_bias_quick_geglu_impl``: ``x_glu, x_linear =
# input.chunk(2, -1)``, ``x_glu.clamp(...)`` in eager PyTorch; the quick-GeGLU after it is
# ``jit_fuser``-compiled): forward the two clamps (1 + 1); backward each clamp's gradient, which
# reads its strided input (1.5 + 1.5).
CLAMP_STRIDED_PASSES = (2.0, 3.0)
# Passes over the query or key tensor of the eager RoPE (module docstring): forward t * cos (2),
# the negated half (1), its concatenation (2), * sin (2), the sum (3), the final concatenation
# (2): 12; backward the gradients of the sum's two terms times cos and sin (2 + 2), the negation
# (1), the chunk's gradient concatenated (2), the two branches summed (3): 10.
ROPE_PASSES = (12.0, 10.0)
# Of those, the kernels with a broadcast or strided operand (TensorIterator's non-vectorized kernel,
# :mod:`topo.strided_rate`; rope_utils.py @ b0cc2706 ``(t * cos_) + (_rotate_half(t) * sin_)`` with
# cos_/sin_ of shape [s, 1, 1, d], ``_rotate_half``'s ``torch.chunk``): forward t * cos (2), the
# negated strided half (1), * sin (2): 5; backward the gradient times cos and times sin (2 + 2) and
# the negation of a half of it (1): 5.
ROPE_STRIDED_PASSES = (5.0, 5.0)
# Passes over the fp32 frequencies, per tensor: cos and sin (2 + 2), their mscale (2 + 2), their
# casts to bf16 (1.5 + 1.5: an fp32 read, a bf16 write).
ROPE_FREQ_PASSES = 11.0
# NeMo AutoModel's GPT-OSS RoPE (components/models/gpt_oss/rope_utils.py ``apply_rotary_emb`` @
# 01926a5c443b7979463c73341bf64adf79de638e, eager, in fp32), in passes of the bf16 tensor (2 bytes
# an element): forward x.to(float32) (1 read, 2 written), x1*cos, x2*sin, x2*cos, x1*sin (each a
# half in fp32: 1 read, 1 written), the difference and the sum (2 read, 1 written each), the
# concatenation (2 read, 2 written), the cast back (2 read, 1 written): 24; backward the cast's
# gradient (3), the four products' (2 each), the difference's negation (2), the two halves'
# gradients summed (3 each), chunk's gradient concatenated (4), the first cast's (3): 26. The cos
# and sin are computed once per forward for all layers (RotaryEmbedding), not per layer.
TORCH_FP32_ROPE_PASSES = (24.0, 26.0)
ROPE_KERNELS = 12  # per tensor, forward
# MLA built from eager PyTorch ops, as NeMo AutoModel's DeepSeek-V3 attention runs it (the torch
# runtime; module docstring): bytes per query head and token, with e the element size, d_n/d_r/
# d_v the no-RoPE/RoPE/value head widths and d_qk = d_n + d_r. Forward: the RoPE on q_pe casts it
# to fp32 (e read, 4 written), multiplies it as complex numbers (4 read, 4 written) and casts back
# (4 read, e written): (2e + 16) d_r; q = cat(q_nope, q_pe) reads and writes d_qk (2e d_qk);
# k = cat(k_nope, k_pe expanded over the heads) likewise (2e d_qk); Transformer Engine copies the
# value, a strided view of kv_b's output, to a contiguous tensor (2e d_v). Backward: the RoPE's
# casts and conjugate multiply ((2e + 16) d_r), split's gradient concatenating q's two parts
# (2e d_qk), expand's gradient summing k_pe's over the heads (e d_r read), split's gradient
# concatenating k_nope's and v's (2e (d_n + d_v)).
FP32 = 4


# FlexAttention with sinks, as NeMo AutoModel's GPT-OSS attention runs it (the torch runtime):
# bytes over q (Q elements: tokens x heads x head_dim, the output's size too) and over k or v (KV
# elements each), e the element size. Forward: q, k and v transposed to (b, h, s, d) and made
# contiguous (2e Q + 2 x 2e KV); the sinks rescale ``out * sigmoid(lse - w)`` promotes the bf16
# output to fp32 (e read, 4 written) and ``out.to(q.dtype)`` casts it back (4 read, e written);
# the output transposed back and made contiguous (2e Q). Backward: the cast's gradient (e read, 4
# written), the product's gradient for the output (4 read, 4 written) cast to bf16 (4 read, e
# written) and for the scale (4 + e read), then q's, k's and v's gradients, strided like their
# transposes, copied by their ``view``'s backward (2e Q + 2 x 2e KV).


def _flex_layout_bytes(element: int, q: float, kv: float) -> float:
    """q, k and v transposed and made contiguous (or their gradients copied back), bytes."""
    return 2 * element * q + 2 * 2 * element * kv


def flex_sink_glue_strided_bytes(element: int, q: float, kv: float) -> tuple[float, float]:
    """Of :func:`flex_sink_glue_bytes`, the (forward, backward) bytes of its copies of transposed
    (strided) tensors, TensorIterator's non-vectorized kernel (``Op.strided_bytes``): q, k, v and
    the output made contiguous, and the gradients' copies back; the sinks' rescale is fp32."""
    layout = _flex_layout_bytes(element, q, kv)
    return layout + 2 * element * q, layout


def mla_glue_strided_bytes(element: int, d_v: int) -> tuple[float, float]:
    """Of :func:`mla_glue_bytes`, per query head and token, the bytes of Transformer Engine's copy
    of the strided value (forward); the RoPE runs in fp32, the rest are concatenations."""
    return 2 * element * d_v, 0.0


def flex_sink_glue_bytes(element: int, q: float, kv: float) -> tuple[float, float]:
    """(forward, backward) bytes of the eager FlexAttention-with-sinks glue over ``q`` query
    elements and ``kv`` elements of each of k and v (the passes above)."""
    e = element
    layout = _flex_layout_bytes(e, q, kv)
    sinks_fwd = (e + FP32) + (FP32 + e)
    sinks_bwd = (e + FP32) + 2 * FP32 + (FP32 + e) + (FP32 + e)
    return layout + sinks_fwd * q + 2 * e * q, sinks_bwd * q + layout


def mla_glue_bytes(element: int, d_nope: int, d_rope: int, d_v: int) -> tuple[float, float]:
    """(forward, backward) bytes per query head and token of the eager MLA glue (the passes above)."""
    e, d_qk = element, d_nope + d_rope
    rope = (2 * e + 4 * FP32) * d_rope
    return (rope + 2 * e * d_qk + 2 * e * d_qk + 2 * e * d_v,
            rope + 2 * e * d_qk + e * d_rope + 2 * e * (d_nope + d_v))
COUNT_BYTES = 8  # int64 per-expert token counts (routing_map.sum(dim=0).long())
# The all-to-all dispatcher's preprocess after the router (token_dispatcher.py @ b0cc2706): the
# routing map summed per expert, the sum cast to int64, the send splits (a reshaped sum), the
# local experts' slice made contiguous, its sums per rank, per TP rank and per local expert
# (7 kernels), then the host copies of the counts, send, receive and TP splits (4).
COUNT_KERNELS = 11
# Kernels the host issues per forward op, from Python and per local expert (Megatron-Core @
# b0cc2706 with permute and router fusion, Transformer Engine v2.10): (Python, Python per local
# expert, C++ per local expert). Permutation: TE's make_row_id_map (3 Triton passes) and
# permute_with_mask_map (triton/permutation.py); the sort and unsort: make_chunk_sort_map and
# sort_chunks_by_map; dispatch: the tokens' and the probabilities' all_to_all; the grouped GEMMs:
# one GroupedLinear call whose C++ loop issues one cuBLAS GEMM per local expert
# (multi_stream_cublas_gemm); the clamp: two clamps and a cat (fused_bias_geglu.py), the
# activation: the offset's host-to-device torch.tensor and the fused kernel; the fc2 bias:
# t + b * p per local expert and the cat (experts.py ``_apply_bias``). Any other op: one kernel
# (a floor: fused by the framework or not, its Python issues at least one).
LAUNCHES: dict[str, tuple[int, int, int]] = {
    "qkv": (2, 0, 0),  # TE LayerNormLinear: the norm, then the GEMM (module/layernorm_linear.py)
    # the attention's bias-dropout-add, then an MoE layer's own pre-MLP norm (gpt_layer_specs.py:
    # ``pre_mlp_layernorm`` a TE norm "if num_experts", not fused into a linear)
    "norm_res": (2, 0, 0),
    "attn.rope": (2 * ROPE_KERNELS, 0, 0),  # queries and keys (module docstring)
    "experts.counts": (COUNT_KERNELS, 0, 0),
    "permute": (4, 0, 0),
    "dispatch": (2, 0, 0),
    "experts.sort": (2, 0, 0),
    "experts.unsort": (2, 0, 0),
    "experts.fc1": (1, 0, 1),
    "experts.fc2": (1, 0, 1),
    "experts.act_clamp": (3, 0, 0),
    "experts.act": (2, 0, 0),
    "experts.fc2_bias": (1, 2, 0),
}


def forward_launches(name: str, experts_local: int) -> tuple[int, int]:
    """(Python-issued, C++-issued) kernels of the forward op named ``name`` ("L3.experts.fc1",
    ".recompute" allowed) with ``experts_local`` local experts (:data:`LAUNCHES`; 1 and 0 for an
    op not listed)."""
    role = name.split(".", 1)[1] if name[:1] == "L" and "." in name else name
    role = role.removesuffix(".recompute")
    python, per_expert, cpp = LAUNCHES.get(role, (1, 0, 0))
    return python + per_expert * experts_local, cpp * experts_local
