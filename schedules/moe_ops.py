"""The work of one MoE layer's feed-forward part on one rank, per micro-batch: router, token
permutation, dispatch and combine all-to-alls over the expert-parallel group, the grouped
expert GEMMs, shared experts; backward mirrors forward.

Forward, as Megatron-Core's MoE layer with the all-to-all token dispatcher runs it:

1. router: a (T x h)·(h x E) GEMM over the rank's ``T`` tokens (the sequence-parallel shard
   under TP), then the softmax/top-k scores (fp32 element-wise);
2. permutation: each token copied once per chosen expert, grouped by expert (T·top_k rows);
3. dispatch: an all-to-all over the EP group; each rank sends T·top_k·h elements, of which
   (ep-1)/ep leave it (:func:`schedules.moe.all_to_all_bytes_per_token`); with ``etp`` > 1 the
   received tokens are all-gathered over the expert-TP group (and reduce-scattered back);
4. experts: ``E/ep`` local experts as grouped GEMMs (``batch`` = local experts) over the tokens
   the *most loaded* rank receives, ``T·top_k·load``: ``load = min(moe_imbalance, ep)`` (a rank
   cannot receive more than every token), capped by the model's capacity factor (an expert
   drops what exceeds ``capacity_factor`` x its even share); the activation function between;
5. combine: the all-to-all back, then un-permutation and the top-k weighted sum;
6. shared experts: a dense MLP of ``num_shared_experts x shared_ffn`` on every token, TP-split
   with the sub-block's sequence-parallel all-gather / reduce-scatter.

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
gradient before the QKV's (:meth:`MoEShape.rope`).

The all-to-alls are priced for the most loaded rank too: their message is the send buffer
(T·top_k·h elements) times ``load``, on the EP group's links (:mod:`sim.placement`). They block
the compute stream unless the plan overlaps them (:mod:`schedules.passes.ep_overlap`). With
``moe_dispatcher="deepep"`` the EP op's group carries DeepEP's dispatch (the experts, top-k and
routing, :class:`core.groups.DeepEP`) for the pricer's per-node deduplication
(:func:`sim.placement.deepep_volume`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.groups import Axis, CommGroup, DeepEP
from core.taskgraph import Op, collective_op, matmul
from core.vocab import Collective, GemmRole, Kind, Lane, OpClass, Runtime
from schedules.layer_ops import ELEMENTWISE_PASSES, LayerShape, Matmul, _beside, _sp_gather, _tp_ops
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan

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
# Passes over the query or key tensor of the eager RoPE (module docstring): forward t * cos (2),
# the negated half (1), its concatenation (2), * sin (2), the sum (3), the final concatenation
# (2): 12; backward the gradients of the sum's two terms times cos and sin (2 + 2), the negation
# (1), the chunk's gradient concatenated (2), the two branches summed (3): 10.
ROPE_PASSES = (12.0, 10.0)
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


def flex_sink_glue_bytes(element: int, q: float, kv: float) -> tuple[float, float]:
    """(forward, backward) bytes of the eager FlexAttention-with-sinks glue over ``q`` query
    elements and ``kv`` elements of each of k and v (the passes above)."""
    e = element
    layout = 2 * e * q + 2 * 2 * e * kv
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


def expert_dim(axis: Axis, plan: ParallelPlan, deepep: DeepEP | None = None) -> CommGroup:
    """The group of an expert-dimension collective (the pricer resolves it, :mod:`sim.placement`)."""
    return CommGroup.expert(axis, plan.ep, plan.etp, deepep)


def routing_load(model: ModelSpec, plan: ParallelPlan) -> float:
    """Tokens the most loaded EP rank receives, as a multiple of the even share:
    ``min(moe_imbalance, ep)``, capped by the capacity factor when the model sets one."""
    load = min(float(plan.moe_imbalance), float(plan.ep))
    cf = model.moe.capacity_factor if model.moe is not None else None
    return min(load, float(cf)) if cf is not None else load


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """Sizes of one MoE layer's feed-forward work on one rank for one micro-batch.

    Attributes:
        tokens: tokens entering the router on this rank (T).
        hidden: model width h.
        top_k: routed experts per token.
        experts_local: routed experts this rank holds (E / ep).
        load: most-loaded rank's tokens over the even share (:func:`routing_load`).
        expert_tokens: token copies the most loaded rank's experts compute (T·top_k·load·etp).
        expert_ffn: one expert's inner width on this rank (ffn / etp).
        up: 2 for SwiGLU (gate and up), 1 for GELU.
        element: bytes of one activation element.
        a2a_bytes: one all-to-all's message per rank (T·top_k·h·element·load), 0 without EP.
        etp_bytes: the expert-TP all-gather's output (0 without etp).
        router: the router GEMM.
        shared_fc1, shared_fc2: the shared experts' matmuls (empty / None without them).
        act_passes: (forward, backward) memory passes of the activation function.
        ep_dim, etp_dim: the groups of the EP and expert-TP collectives.
        fc2_bias, clamp: the eager per-expert fc2 bias and activation clamp (module docstring).
        sort: the received rows are sorted by local expert and back (module docstring).
        host_sync: the dispatch waits for the host (:mod:`sim.host_sync`).
        counts_bytes: the per-expert counts' all-gather output over the EP group (0: none).
        rope_passes: (forward, backward) passes of the unfused RoPE over ``rope_bytes``:
            Megatron-Core's (:data:`ROPE_PASSES`) or, on the torch runtime, AutoModel's fp32 one
            (:data:`TORCH_FP32_ROPE_PASSES`, no per-layer frequencies).
        rope_bytes, rope_freq_bytes: the queries' and keys' bytes and their fp32 frequencies'
            of an unfused RoPE (0: fused, no op; module docstring).
        norm_passes: forward memory passes of the model's norm (:data:`ELEMENTWISE_PASSES`).
        shared_stream: the shared experts' forward runs on a side stream beside the dispatch
            (:func:`_shared_stream`).
        attn_glue: (forward, backward) bytes of the attention's eager glue on the torch runtime:
            MLA's (:func:`mla_glue_bytes`, less the layer's own RoPE estimate, which it replaces)
            or FlexAttention's with sinks (:func:`flex_sink_glue_bytes`); 0: none.
    """

    tokens: int
    hidden: int
    top_k: int
    num_experts: int
    experts_local: int
    load: float
    expert_tokens: float
    expert_ffn: int
    up: int
    element: int
    a2a_bytes: float
    etp_bytes: float
    router: Matmul
    shared_fc1: tuple[Matmul, ...]
    shared_fc2: Matmul | None
    shared_act_bytes: float
    act_passes: tuple[float, float]
    ep_dim: CommGroup
    etp_dim: CommGroup
    fc2_bias: bool = False
    clamp: bool = False
    sort: bool = False
    norm_passes: float = 2.0
    host_sync: bool = False
    counts_bytes: float = 0.0
    rope_bytes: float = 0.0
    rope_freq_bytes: float = 0.0
    rope_passes: tuple[float, float] = ROPE_PASSES
    attn_glue: tuple[float, float] = (0.0, 0.0)
    shared_stream: bool = False

    @property
    def rows_per_expert(self) -> int:
        """Rows of each local expert's GEMM (the grouped GEMM's m)."""
        return max(1, round(self.expert_tokens / self.experts_local))

    def grouped(self, name: str, kind: Kind, layer: int, m: int, n: int, k: int, role: GemmRole) -> Op:
        """One grouped GEMM over the local experts (``role``: which of the experts' GEMMs it is)."""
        op = matmul(Lane.COMPUTE, kind, f"L{layer}.{name}", m, n, k, batch=self.experts_local, layer=layer)
        return dataclasses.replace(op, gemm_role=role)

    def _ew(self, kind: Kind, name: str, layer: int, nbytes: float) -> Op:
        return Op(Lane.COMPUTE, kind, f"L{layer}.{name}", OpClass.ACTIVATION, bytes=nbytes, layer=layer)

    def _a2a(self, kind: Kind, name: str, layer: int) -> tuple[Op, ...]:
        if self.a2a_bytes <= 0:
            return ()
        return (Op(Lane.EP, Kind.ALL_TO_ALL, f"L{layer}.{name}", OpClass.ALL_TO_ALL, bytes=self.a2a_bytes,
                   dim=self.ep_dim, layer=layer),)

    def _etp(self, coll: Collective, name: str, layer: int) -> tuple[Op, ...]:
        if self.etp_bytes <= 0:
            return ()
        return (collective_op(Lane.EP, coll, f"L{layer}.{name}", bytes=self.etp_bytes, dim=self.etp_dim, layer=layer),)

    @property
    def _permute_bytes(self) -> float:
        """A permutation's traffic: T·h read, T·top_k·h written (and the reverse)."""
        return self.element * self.tokens * self.hidden * (1 + self.top_k)

    @property
    def _routing_bytes(self) -> float:
        return ROUTER_SCORE_BYTES * ROUTER_PASSES * self.tokens * self.num_experts

    def _act_bytes(self, backward: bool) -> float:
        return self.act_passes[1 if backward else 0] * self.element * self.expert_tokens * self.expert_ffn

    def _sort(self, kind: Kind, layer: int, name: str) -> tuple[Op, ...]:
        """One re-ordering of the received rows by local expert (a read and a write of each)."""
        if not self.sort:
            return ()
        return (self._ew(kind, f"experts.{name}", layer, 2 * self.element * self.expert_tokens * self.hidden),)

    def _epilogue(self, kind: Kind, layer: int, name: str, backward: bool, tag: str = "") -> tuple[Op, ...]:
        """The eager fc2 bias add or activation clamp (module docstring), if the model has it."""
        side = 1 if backward else 0
        suffix = ".dgrad" if backward else tag
        if name == "fc2_bias" and self.fc2_bias:
            nbytes = FC2_BIAS_PASSES[side] * self.element * self.expert_tokens * self.hidden
        elif name == "act_clamp" and self.clamp:
            nbytes = CLAMP_PASSES[side] * self.element * self.expert_tokens * self.up * self.expert_ffn
        else:
            return ()
        return (self._ew(kind, f"experts.{name}{suffix}", layer, nbytes),)

    def _sync(self, kind: Kind, layer: int, tag: str) -> tuple[Op, ...]:
        """The host synchronisation after the permutation (module docstring)."""
        if not self.host_sync:
            return ()
        return (Op(Lane.HOST, kind, f"L{layer}.moe.host_sync{tag}", OpClass.HOST_SYNC, layer=layer,
                   duration_s=0.0, batch=self.experts_local),)

    def _counts(self, kind: Kind, layer: int, tag: str) -> tuple[Op, ...]:
        """The all-to-all dispatcher's per-expert counts: their reductions and their all-gather
        over the EP group, before the permutation (module docstring)."""
        if self.counts_bytes <= 0:
            return ()
        routing_map = self.tokens * self.num_experts  # the boolean map the counts are summed from
        return (self._ew(kind, f"experts.counts{tag}", layer, routing_map),
                Op(Lane.EP, Kind.ALL_GATHER, f"L{layer}.experts.counts_ag{tag}", OpClass.ALL_GATHER,
                   bytes=self.counts_bytes, dim=self.ep_dim, layer=layer))

    def rope(self, kind: Kind, layer: int, tag: str = "", backward: bool = False) -> tuple[Op, ...]:
        """The unfused YaRN RoPE of the layer's attention (module docstring): after the QKV
        projection forward (``tag``: ".recompute"), before its gradient backward."""
        glue = self.attn_glue[1 if backward else 0]
        ops = (self._ew(kind, "attn.glue" + (".dgrad" if backward else tag), layer, glue),) if glue > 0 else ()
        if self.rope_bytes <= 0:
            return ops
        if backward:
            return (*ops, self._ew(kind, "attn.rope.dgrad", layer, self.rope_passes[1] * self.rope_bytes))
        nbytes = self.rope_passes[0] * self.rope_bytes + 2 * ROPE_FREQ_PASSES * self.rope_freq_bytes
        return (*ops, self._ew(kind, "attn.rope" + tag, layer, nbytes))

    # ---- passes ----
    def forward(self, plan: ParallelPlan, shape: LayerShape, layer: int, tag: str = "") -> tuple[Op, ...]:
        """Forward of the MoE feed-forward part (``tag``: ".recompute" inside a backward)."""
        kind, m, f, h = Kind.FWD, self.rows_per_expert, self.expert_ffn, self.hidden
        shared = self._shared_forward(plan, shape, layer, tag)
        dispatch = self._a2a(kind, "dispatch" + tag, layer)
        beside = self.shared_stream and bool(shared) and bool(dispatch)
        if beside:  # the shared experts' kernels, then the dispatch beside them
            dispatch = (dataclasses.replace(dispatch[0], concurrent=True,
                                            beside=sum(op.lane == Lane.COMPUTE for op in shared)),)
        return (
            self.router.forward(kind, layer, tag),
            self._ew(kind, "router.topk" + tag, layer, self._routing_bytes),
            *self._counts(kind, layer, tag),
            self._ew(kind, "permute" + tag, layer, self._permute_bytes),
            *self._sync(kind, layer, tag),
            *(shared if beside else ()),
            *dispatch,
            *self._etp(Collective.ALL_GATHER, "etp_ag" + tag, layer),
            *self._sort(kind, layer, "sort" + tag),
            self.grouped("experts.fc1" + tag, kind, layer, m, self.up * f, h, GemmRole.FPROP),
            *self._epilogue(kind, layer, "act_clamp", backward=False, tag=tag),
            self._ew(kind, "experts.act" + tag, layer, self._act_bytes(False)),
            self.grouped("experts.fc2" + tag, kind, layer, m, h, f, GemmRole.FPROP),
            *self._epilogue(kind, layer, "fc2_bias", backward=False, tag=tag),
            *self._sort(kind, layer, "unsort" + tag),
            *self._etp(Collective.REDUCE_SCATTER, "etp_rs" + tag, layer),
            *self._a2a(kind, "combine" + tag, layer),
            self._ew(kind, "unpermute" + tag, layer, self._permute_bytes),
            *(() if beside else shared),
        )

    def _shared_forward(self, plan: ParallelPlan, shape: LayerShape, layer: int, tag: str) -> tuple[Op, ...]:
        if self.shared_fc2 is None:
            return ()
        kind = Kind.FWD
        return (
            *_beside(plan, _sp_gather(plan, shape, layer, "mlp", backward=False),
                     tuple(mm.forward(kind, layer, tag) for mm in self.shared_fc1), comm_first=True),
            self._ew(kind, "shared.act" + tag, layer, self.act_passes[0] * self.shared_act_bytes),
            *_beside(plan, _tp_ops(plan, shape, layer, "mlp", backward=False),
                     (self.shared_fc2.forward(kind, layer, tag),), comm_first=False),
        )

    def act_recompute(self, layer: int) -> tuple[Op, ...]:
        """Megatron-Core's ``--recompute-modules layernorm moe_act`` at the start of this layer's
        backward: the pre-MLP norm (``norm_passes`` over the rank's T x h tokens) and the experts'
        activation with its eager clamp (megatron/core/transformer/moe/experts.py @ b0cc2706:
        ``bias_act_func`` under ``CheckpointWithoutOutput``)."""
        kind, tag = Kind.FWD, ".recompute"
        norm = self.norm_passes * self.element * self.tokens * self.hidden
        return (self._ew(kind, "pre_mlp_norm" + tag, layer, norm),
                *self._epilogue(kind, layer, "act_clamp", backward=False, tag=tag),
                self._ew(kind, "experts.act" + tag, layer, self._act_bytes(False)))

    def backward_input(self, plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind) -> tuple[Op, ...]:
        """Input-gradient half, in backward order: the combine's gradient travels back as a
        dispatch-direction all-to-all, the dispatch's as a combine."""
        m, f, h = self.rows_per_expert, self.expert_ffn, self.hidden
        shared: tuple[Op, ...] = ()
        if self.shared_fc2 is not None:
            shared = (
                *_beside(plan, _tp_ops(plan, shape, layer, "mlp", backward=True),
                         (self.shared_fc2.dgrad(kind, layer),), comm_first=True),
                self._ew(kind, "shared.act.dgrad", layer, self.act_passes[1] * self.shared_act_bytes),
                *_beside(plan, _sp_gather(plan, shape, layer, "mlp", backward=True),
                         tuple(mm.dgrad(kind, layer) for mm in self.shared_fc1), comm_first=False),
            )
        return (
            *shared,
            self._ew(kind, "unpermute.dgrad", layer, self._permute_bytes),
            *self._a2a(kind, "combine.dgrad", layer),
            *self._etp(Collective.ALL_GATHER, "etp_rs.dgrad", layer),
            *self._sort(kind, layer, "unsort.dgrad"),
            *self._epilogue(kind, layer, "fc2_bias", backward=True),
            self.grouped("experts.fc2.dgrad", kind, layer, m, f, h, GemmRole.DGRAD),
            self._ew(kind, "experts.act.dgrad", layer, self._act_bytes(True)),
            *self._epilogue(kind, layer, "act_clamp", backward=True),
            self.grouped("experts.fc1.dgrad", kind, layer, m, h, self.up * f, GemmRole.DGRAD),
            *self._sort(kind, layer, "sort.dgrad"),
            *self._etp(Collective.REDUCE_SCATTER, "etp_ag.dgrad", layer),
            *self._a2a(kind, "dispatch.dgrad", layer),
            self._ew(kind, "permute.dgrad", layer, self._permute_bytes),
            self._ew(kind, "router.topk.dgrad", layer, self._routing_bytes),
            self.router.dgrad(kind, layer),
        )

    def backward_weight(self, kind: Kind, layer: int) -> tuple[Op, ...]:
        """Weight-gradient half: the experts' (input transposed times output gradient, per
        expert), the shared experts' and the router's."""
        m, f, h = self.rows_per_expert, self.expert_ffn, self.hidden
        shared = ((self.shared_fc2.wgrad(kind, layer), *(mm.wgrad(kind, layer) for mm in self.shared_fc1))
                  if self.shared_fc2 is not None else ())
        return (
            self.grouped("experts.fc2.wgrad", kind, layer, f, h, m, GemmRole.WGRAD),
            self.grouped("experts.fc1.wgrad", kind, layer, h, self.up * f, m, GemmRole.WGRAD),
            *shared,
            self.router.wgrad(kind, layer),
        )

    def matmuls(self) -> tuple[Matmul, ...]:
        """The ungrouped matmuls (router, shared experts), for selective recomputation."""
        return (self.router, *self.shared_fc1, *((self.shared_fc2,) if self.shared_fc2 else ()))


def _deepep(model: ModelSpec, plan: ParallelPlan) -> DeepEP | None:
    """The EP all-to-all's DeepEP dispatch (its experts, top-k and routing), None without DeepEP."""
    moe = model.moe
    assert moe is not None
    if plan.moe_dispatcher != "deepep":
        return None
    return DeepEP(experts=moe.num_experts, top_k=moe.top_k, round_robin=moe.routing == "round-robin")


def moe_shape(model: ModelSpec, plan: ParallelPlan, layer: int) -> MoEShape:
    """One MoE layer's feed-forward sizes on one rank for one micro-batch."""
    moe = model.moe
    if moe is None:
        raise ValueError(f"model={model.name!r} is invalid here: it has no MoE layers")
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
    passes = ELEMENTWISE_PASSES["fused" if plan.fused_elementwise else "eager"][model.ffn_kind]
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
        norm_passes=float(ELEMENTWISE_PASSES["fused" if plan.fused_elementwise else "eager"][model.norm][0]),
        host_sync=_host_sync(plan),
        counts_bytes=(COUNT_BYTES * moe.num_experts * plan.ep
                      if plan.framework == Runtime.MEGATRON and plan.moe_dispatcher == "alltoall" and plan.ep > 1 else 0.0),
        rope_bytes=rope[0], rope_freq_bytes=rope[1] if plan.framework == Runtime.MEGATRON else 0.0,
        rope_passes=ROPE_PASSES if plan.framework == Runtime.MEGATRON else TORCH_FP32_ROPE_PASSES,
        attn_glue=_attn_glue(model, plan, t), shared_stream=_shared_stream(plan),
    )


def _attn_glue(model: ModelSpec, plan: ParallelPlan, tokens: float) -> tuple[float, float]:
    """(forward, backward) bytes of one micro-batch's eager attention glue on one rank, torch
    runtime only (module docstring); (0, 0) for other attention.

    - MLA (:func:`mla_glue_bytes`), less the layer's RoPE estimate
      (:func:`schedules.layer_ops._elementwise_bytes`' ``rope`` passes), which it replaces. Source:
      NeMo AutoModel's ``MLA.forward`` (components/models/deepseek_v3/layers.py) and
      ``apply_rotary_emb`` (rope_utils.py: ``view_as_complex(x.float() ...)``, ``y.to(dtype)``) @
      01926a5c443b7979463c73341bf64adf79de638e; Transformer Engine v2.5 ``get_qkv_layout`` makes q,
      k and v contiguous when the value's strides match no layout
      (attention/dot_product_attention/utils.py).
    - Attention sinks (GPT-OSS), run through AutoModel's FlexAttention
      (:func:`flex_sink_glue_bytes`): components/attention/utils.py
      ``preprocess_args_and_kwargs_for_attn``/``postprocess_output_for_attn`` (the "flex" branch)
      and components/attention/flex_attention.py ``FlexAttention.forward`` @ 01926a5c.
    """
    moe = model.moe
    assert moe is not None
    spec = moe.attention
    if plan.framework != Runtime.TORCH or spec is None:
        return 0.0, 0.0
    e, heads = plan.element_bytes, model.num_heads / plan.tp
    if spec.sinks:
        kv_heads = max(1, model.kv_heads // plan.tp)
        return flex_sink_glue_bytes(e, tokens * heads * spec.head_dim, tokens * kv_heads * spec.head_dim)
    if spec.kv_lora_rank is None:
        return 0.0, 0.0
    per = mla_glue_bytes(e, spec.head_dim - spec.qk_rope_head_dim, spec.qk_rope_head_dim, spec.v_dim)
    passes = ELEMENTWISE_PASSES["fused" if plan.fused_elementwise else "eager"]["rope"]
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
    moe = model.moe
    assert moe is not None
    spec = moe.attention
    unfused = plan.framework == Runtime.MEGATRON or plan.fused_elementwise  # the layer priced a fused RoPE
    if (moe.rope_scaling != "yarn" or not unfused or model.position_embedding != "rope"
            or (spec is not None and spec.kv_lora_rank is not None)):
        return 0.0, 0.0
    head_dim = spec.head_dim if spec is not None else model.hidden_size // model.num_heads
    heads = model.num_heads / plan.tp + max(1.0, model.kv_heads / plan.tp)
    return plan.element_bytes * tokens * heads * head_dim, 4.0 * tokens * head_dim
