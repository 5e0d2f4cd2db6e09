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

from core.groups import CommGroup
from core.taskgraph import Op, collective_op, host_sync_op, matmul
from core.vocab import Collective, GemmRole, Kind, Lane, OpClass
from schedules.layer_comm import beside, sp_gather, tp_ops
from schedules.layer_ops import LayerShape, Matmul
from schedules.moe_kernels import (
    CLAMP_PASSES,
    CLAMP_STRIDED_PASSES,
    FC2_BIAS_PASSES,
    ROPE_FREQ_PASSES,
    ROPE_PASSES,
    ROPE_STRIDED_PASSES,
    ROUTER_PASSES,
    ROUTER_SCORE_BYTES,
)
from schedules.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """Sizes of one MoE layer's feed-forward work on one rank for one micro-batch.

    Attributes:
        tokens: tokens entering the router on this rank (T).
        hidden: model width h.
        top_k: routed experts per token.
        experts_local: routed experts this rank holds (E / ep).
        load: most-loaded rank's tokens over the even share (:func:`schedules.moe_sizes.routing_load`).
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
            Megatron-Core's (:data:`schedules.moe_kernels.ROPE_PASSES`) or, on the torch runtime, AutoModel's fp32 one
            (:data:`TORCH_FP32_ROPE_PASSES`, no per-layer frequencies).
        rope_bytes, rope_freq_bytes: the queries' and keys' bytes and their fp32 frequencies'
            of an unfused RoPE (0: fused, no op; module docstring).
        strided: the eager RoPE's and clamp's kernels with a broadcast or strided operand are
            priced at the strided rate (:data:`schedules.moe_kernels.ROPE_STRIDED_PASSES`,
            :data:`CLAMP_STRIDED_PASSES`; ``Op.strided_bytes``): Megatron-Core's, 16-bit.
        norm_passes: forward memory passes of the model's norm (:data:`schedules.elementwise.ELEMENTWISE_PASSES`).
        shared_stream: the shared experts' forward runs on a side stream beside the dispatch
            (:func:`schedules.moe_sizes._shared_stream`).
        attn_glue: (forward, backward) bytes of the attention's eager glue on the torch runtime:
            MLA's (:func:`schedules.moe_kernels.mla_glue_bytes`, less the layer's own RoPE estimate, which it replaces)
            or FlexAttention's with sinks (:func:`schedules.moe_kernels.flex_sink_glue_bytes`); 0: none.
        attn_glue_strided: of ``attn_glue``, the copies of strided 16-bit tensors (``Op.strided_bytes``).
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
    strided: bool = False
    attn_glue: tuple[float, float] = (0.0, 0.0)
    attn_glue_strided: tuple[float, float] = (0.0, 0.0)
    shared_stream: bool = False
    recomputes_sp_gathers: bool = False  # per-op SAC regathers a dense MLP's input only (layer_ops)

    @property
    def rows_per_expert(self) -> int:
        """Rows of each local expert's GEMM (the grouped GEMM's m)."""
        return max(1, round(self.expert_tokens / self.experts_local))

    def grouped(self, name: str, kind: Kind, layer: int, m: int, n: int, k: int, role: GemmRole) -> Op:
        """One grouped GEMM over the local experts (``role``: which of the experts' GEMMs it is)."""
        op = matmul(Lane.COMPUTE, kind, f"L{layer}.{name}", m, n, k, batch=self.experts_local, layer=layer)
        return dataclasses.replace(op, gemm_role=role)

    def _ew(self, kind: Kind, name: str, layer: int, nbytes: float, strided: float = 0.0) -> Op:
        """An element-wise op of ``nbytes``, ``strided`` of them strided (``Op.strided_bytes``)."""
        return Op(Lane.COMPUTE, kind, f"L{layer}.{name}", OpClass.ACTIVATION, bytes=nbytes, layer=layer,
                  strided_bytes=strided)

    def _strided(self, nbytes: float) -> float:
        """``nbytes`` of Megatron-Core's eager RoPE or clamp, if they are priced strided."""
        return nbytes if self.strided else 0.0

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
            per_pass = self.element * self.expert_tokens * self.up * self.expert_ffn
            return (self._ew(kind, f"experts.{name}{suffix}", layer, CLAMP_PASSES[side] * per_pass,
                             self._strided(CLAMP_STRIDED_PASSES[side] * per_pass)),)
        else:
            return ()
        return (self._ew(kind, f"experts.{name}{suffix}", layer, nbytes),)

    def _sync(self, kind: Kind, layer: int, tag: str) -> tuple[Op, ...]:
        """The host synchronisation after the permutation (module docstring)."""
        if not self.host_sync:
            return ()
        return (host_sync_op(kind, f"L{layer}.moe.host_sync{tag}", layer=layer, batch=self.experts_local),)

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
        side = 1 if backward else 0
        glue = self.attn_glue[side]
        ops = ((self._ew(kind, "attn.glue" + (".dgrad" if backward else tag), layer, glue, self.attn_glue_strided[side]),)
               if glue > 0 else ())
        if self.rope_bytes <= 0:
            return ops
        if backward:
            return (*ops, self._ew(kind, "attn.rope.dgrad", layer, self.rope_passes[1] * self.rope_bytes,
                                   self._strided(ROPE_STRIDED_PASSES[1] * self.rope_bytes)))
        nbytes = self.rope_passes[0] * self.rope_bytes + 2 * ROPE_FREQ_PASSES * self.rope_freq_bytes
        return (*ops, self._ew(kind, "attn.rope" + tag, layer, nbytes,
                               self._strided(ROPE_STRIDED_PASSES[0] * self.rope_bytes)))

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
            *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=False),
                     tuple(mm.forward(kind, layer, tag) for mm in self.shared_fc1), comm_first=True),
            self._ew(kind, "shared.act" + tag, layer, self.act_passes[0] * self.shared_act_bytes),
            *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=False),
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
                *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=True),
                         (self.shared_fc2.dgrad(kind, layer),), comm_first=True),
                self._ew(kind, "shared.act.dgrad", layer, self.act_passes[1] * self.shared_act_bytes),
                *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=True),
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
