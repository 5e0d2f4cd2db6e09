"""The work of one transformer block on one GPU, as a sequence of Ops, per pass.

Per micro-batch and per TP/CP rank: the block's matmuls (FLOPs split by tp and cp), the attention
core, memory-bound element-wise work, and the tensor-parallel communication that the Megatron-LM
layout needs (Shoeybi et al. 2019; Korthikanti et al. 2022):

- TP without SP: one all-reduce after attention and one after the MLP in forward, and two in
  backward (input gradients of the column-parallel matmuls).
- TP with SP: all-gather before and reduce-scatter after each of the two sub-blocks, in forward;
  in backward the conjugates (reduce-scatter, all-gather) plus the re-gather of the sharded
  input needed by the weight gradient, which Megatron overlaps with the input-gradient matmul.
- CP (ring attention): K/V blocks travel cp-1 hops around the CP ring under the attention kernel
  (forward); backward passes K/V and their gradients (2x).

TP collectives block the compute that needs them, so they are ops inside the compute task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from core.groups import TP
from core.taskgraph import Op
from core.vocab import GemmRole, Kind, Lane, OpClass
from schedules.attention_kernels import kernel_rate
from schedules.bias_grads import bias_grad_bytes
from schedules.elementwise import elementwise_passes, strided_passes
from schedules.flops import dense_layer_flops
from schedules.layer_comm import beside, cp_ops, sp_gather, tp_ops
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.plan.runtime import FUSED_PROJECTIONS

ACT_BYTES = 2  # bf16 activations

@dataclass(frozen=True, kw_only=True)
class Matmul:
    """One weight matmul of a block on one (tp, cp) rank, forward: an (m x k) activation times a
    (k x n) weight slice, ``flops`` of work (the model's count; the dimensions are rounded to
    whole elements where TP splits a dimension unevenly)."""

    name: str
    m: int
    n: int
    k: int
    flops: float
    normed_input: bool = False  # its input is a norm's output (attention qkv, the MLP's fc1)
    quantizable: bool = True  # FP8 recipes quantize it (False: an MoE router, kept in BF16)

    def forward(self, kind: Kind, layer: int, tag: str = "") -> Op:
        role = GemmRole.FPROP_NORMED if self.normed_input else GemmRole.FPROP
        return Op(Lane.COMPUTE, kind, f"L{layer}.{self.name}{tag}", OpClass.GEMM, flops=self.flops, layer=layer,
                  m=self.m, n=self.n, k=self.k, gemm_role=self._role(role))

    def dgrad(self, kind: Kind, layer: int) -> Op:
        """Input gradient: dY (m x n) times the weight transposed (n x k)."""
        return Op(Lane.COMPUTE, kind, f"L{layer}.{self.name}.dgrad", OpClass.GEMM, flops=self.flops, layer=layer,
                  m=self.m, n=self.k, k=self.n, gemm_role=self._role(GemmRole.DGRAD))

    def wgrad(self, kind: Kind, layer: int) -> Op:
        """Weight gradient: the input transposed (k x m) times dY (m x n)."""
        return Op(Lane.COMPUTE, kind, f"L{layer}.{self.name}.wgrad", OpClass.GEMM, flops=self.flops, layer=layer,
                  m=self.k, n=self.n, k=self.m, gemm_role=self._role(GemmRole.WGRAD))

    def _role(self, role: GemmRole) -> GemmRole | None:
        """The op's ``gemm_role``: ``role`` where an FP8 recipe quantizes this matmul, else None."""
        return role if self.quantizable else None


class FFNOps(Protocol):
    """The ops of a block's feed-forward part, whatever its kind: :class:`DenseFFN` (an MLP) or
    :class:`schedules.moe_ops.MoEShape` (an MoE layer's router, experts and token exchange)."""

    @property
    def recomputes_sp_gathers(self) -> bool:
        """torchtitan's per-op SAC recomputes the all-gathers of its sequence-parallel input."""

    def forward(self, plan: ParallelPlan, shape: LayerShape, layer: int, tag: str = "") -> tuple[Op, ...]: ...

    def backward_input(self, plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind) -> tuple[Op, ...]: ...

    def backward_weight(self, kind: Kind, layer: int) -> tuple[Op, ...]: ...

    def act_recompute(self, layer: int) -> tuple[Op, ...]: ...

    def matmuls(self) -> tuple[Matmul, ...]: ...

    def rope(self, kind: Kind, layer: int, tag: str = "", backward: bool = False) -> tuple[Op, ...]: ...


@dataclass(frozen=True)
class DenseFFN:
    """A dense block's MLP: ``fc1`` (the input projection, or SwiGLU's gate and up) beside the
    sequence-parallel gather of its input, ``fc2`` beside the TP reduction of its output."""

    fc1: tuple[Matmul, ...]
    fc2: Matmul
    recomputes_sp_gathers: bool = True

    def forward(self, plan: ParallelPlan, shape: LayerShape, layer: int, tag: str = "") -> tuple[Op, ...]:
        """The MLP's forward."""
        kind = Kind.FWD
        return (
            *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=False),
                    tuple(mm.forward(kind, layer, tag) for mm in self.fc1), comm_first=True),
            *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=False),
                    (self.fc2.forward(kind, layer, tag),), comm_first=False),
        )

    def backward_input(self, plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind) -> tuple[Op, ...]:
        """The MLP's input gradients, in backward order."""
        return (
            *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=True), (self.fc2.dgrad(kind, layer),),
                    comm_first=True),
            *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=True),
                    tuple(mm.dgrad(kind, layer) for mm in self.fc1), comm_first=False),
        )

    def backward_weight(self, kind: Kind, layer: int) -> tuple[Op, ...]:
        """The MLP's weight gradients."""
        return (self.fc2.wgrad(kind, layer), *(mm.wgrad(kind, layer) for mm in self.fc1))

    def act_recompute(self, layer: int) -> tuple[Op, ...]:
        """Nothing: ``layernorm-moe-act`` recomputes an MoE layer's pieces only."""
        return ()

    def matmuls(self) -> tuple[Matmul, ...]:
        """The MLP's matmuls in forward order."""
        return (*self.fc1, self.fc2)

    def rope(self, kind: Kind, layer: int, tag: str = "", backward: bool = False) -> tuple[Op, ...]:
        """Nothing: a dense model's RoPE is fused into its attention."""
        return ()


@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """Per-GPU sizes of one block's work for one micro-batch (bytes and FLOPs)."""

    tokens_local: float  # tokens of the micro-batch held by this CP rank
    hidden_bytes: float  # one full [s_local, b, h] bf16 activation (before any TP/SP split)
    kv_block_bytes: float  # K and V of this CP rank's tokens for this TP rank's heads
    qkv: tuple[Matmul, ...]  # the attention's input projections: one fused QKV, or q, k, v
    out: Matmul
    ffn: FFNOps  # the feed-forward part: a dense MLP (DenseFFN) or an MoE layer's (MoEShape)
    attention: float  # executed attention FLOPs (causal half when flash + causal)
    attention_batch: int  # (micro-batch x local heads) score matrices of the attention core
    seq_len: int
    head_dim: int
    elementwise_bytes: float  # forward memory traffic of the element-wise pieces
    elementwise_bwd_bytes: float  # their backward's
    elementwise_strided_bytes: float = 0.0  # of elementwise_bytes, kernels with a broadcast/strided operand
    elementwise_bwd_strided_bytes: float = 0.0  # of elementwise_bwd_bytes, the same
    softmax_bytes: float  # HBM traffic of the unfused s x s softmax/dropout (0 with flash attention)
    attention_kernel: str = "flash2"  # the fused kernel (schedules.attention_kernels)
    causal: bool = False  # the fused kernel runs under a causal mask (Op.causal)
    cp: int = 1  # context-parallel ranks a sequence's attention is split over
    bias_grad_bytes: float = 0.0  # HBM read by the biases' gradient reductions (schedules.bias_grads)

    def elementwise_op(self, kind: Kind, name: str, layer: int, backward: bool = False) -> Op:
        """One of the block's two element-wise ops (``norm_res``, ``act_res``): half its
        element-wise traffic, forward or ``backward``, with half its strided part."""
        nbytes, strided = ((self.elementwise_bwd_bytes, self.elementwise_bwd_strided_bytes) if backward
                           else (self.elementwise_bytes, self.elementwise_strided_bytes))
        return Op(Lane.COMPUTE, kind, name, OpClass.ACTIVATION, bytes=nbytes / 2, layer=layer,
                  strided_bytes=strided / 2)

    @property
    def gemm_qkv(self) -> float:
        return sum(mm.flops for mm in self.qkv)

    @property
    def gemm_out(self) -> float:
        return self.out.flops





def _input_projections(model: ModelSpec, plan: ParallelPlan, t: int, flops_qkv: float,
                       flops_fc1: float) -> tuple[tuple[Matmul, ...], tuple[Matmul, ...]]:
    """The attention's and the MLP's input matmuls on one (tp, cp) rank."""
    h, tp = model.hidden_size, plan.tp
    q_n, kv_n = h / tp, model.kv_size / tp
    up = model.ffn_inputs
    f_n = model.ffn / tp
    if FUSED_PROJECTIONS[plan.framework]:
        return ((Matmul(name="qkv", m=t, n=round(q_n + 2 * kv_n), k=h, flops=flops_qkv, normed_input=True),),
                (Matmul(name="fc1", m=t, n=round(up * f_n), k=h, flops=flops_fc1, normed_input=True),))
    share = q_n + 2 * kv_n
    qkv = tuple(Matmul(name=name, m=t, n=round(n), k=h, flops=flops_qkv * n / share, normed_input=True)
                for name, n in (("q", q_n), ("k", kv_n), ("v", kv_n)))
    fc1 = tuple(Matmul(name=name, m=t, n=round(f_n), k=h, flops=flops_fc1 / up, normed_input=True)
                for name in ("w1", "w3")[:up])
    return qkv, fc1


def layer_shape(model: ModelSpec, plan: ParallelPlan) -> LayerShape:
    """Sizes of one block for one micro-batch on one (tp, cp) rank."""
    fl = dense_layer_flops(model, plan.microbatch_size)
    split = plan.tp * plan.cp
    tokens = plan.microbatch_size * model.seq_len / plan.cp
    act_bytes = plan.element_bytes
    hidden_bytes = act_bytes * tokens * model.hidden_size
    kv_heads_local = max(1, model.kv_heads // plan.tp)
    kv_block = 2 * act_bytes * tokens * kv_heads_local * model.head_dim
    causal_share = 0.5 if (model.causal and plan.flash_attention) else 1.0
    h, f, tp, t = model.hidden_size, model.ffn, plan.tp, round(tokens)
    up = model.ffn_inputs
    fc1_flops = fl.gemm_mlp / split * up / (up + 1)
    qkv, fc1 = _input_projections(model, plan, t, fl.gemm_qkv / split, fc1_flops)
    return LayerShape(
        tokens_local=tokens, hidden_bytes=hidden_bytes, kv_block_bytes=kv_block, qkv=qkv,
        out=Matmul(name="proj", m=t, n=h, k=round(h / tp), flops=fl.gemm_out / split),
        ffn=DenseFFN(fc1, Matmul(name="fc2", m=t, n=h, k=round(f / tp), flops=fl.gemm_mlp / split - fc1_flops)),
        attention=fl.attention / split * causal_share,
        attention_batch=max(1, round(plan.microbatch_size * model.num_heads / tp)),
        seq_len=model.seq_len, head_dim=model.head_dim,
        elementwise_bytes=elementwise_bytes(model, plan, tokens, backward=False),
        elementwise_bwd_bytes=elementwise_bytes(model, plan, tokens, backward=True),
        elementwise_strided_bytes=elementwise_strided_bytes(model, plan, tokens, backward=False),
        elementwise_bwd_strided_bytes=elementwise_strided_bytes(model, plan, tokens, backward=True),
        softmax_bytes=0.0 if plan.flash_attention else softmax_bytes(model, plan, tokens),
        attention_kernel=plan.attention_kernel, causal=causal_share < 1.0, cp=plan.cp,
        bias_grad_bytes=bias_grad_bytes(model, plan, tokens),
    )


def elementwise_bytes(model: ModelSpec, plan: ParallelPlan, tokens: float, backward: bool) -> float:
    """Memory traffic of one block's element-wise pieces on one (tp, cp) rank, bytes: two norms,
    two residual adds, the activation function, two dropouts (if any) and RoPE on q and k (if
    used), at :func:`elementwise_passes`."""
    return _traffic(model, plan, tokens, 1 if backward else 0, elementwise_passes(plan))


def elementwise_strided_bytes(model: ModelSpec, plan: ParallelPlan, tokens: float, backward: bool) -> float:
    """Of :func:`elementwise_bytes`, the bytes of kernels with a broadcast or strided operand
    (:func:`schedules.elementwise.strided_passes`; ``Op.strided_bytes``)."""
    return _traffic(model, plan, tokens, 1 if backward else 0, strided_passes(plan))


def _traffic(model: ModelSpec, plan: ParallelPlan, tokens: float, side: int,
             passes: dict[str, tuple[float, float]]) -> float:
    """Bytes of a block's element-wise pieces at ``passes`` (a piece it lacks: none)."""
    def of(piece: str) -> float:
        return passes.get(piece, (0.0, 0.0))[side]

    element = plan.element_bytes
    hidden = element * tokens * model.hidden_size / (plan.tp if plan.sequence_parallel else 1)
    total = (2 * of(model.norm) + 2 * of("residual") + (2 * of("dropout") if model.dropout else 0.0)) * hidden
    total += of(model.ffn_kind) * element * tokens * model.ffn / plan.tp
    if model.position_embedding == "rope":
        heads = model.num_heads / plan.tp + max(1, model.kv_heads // plan.tp)
        total += of("rope") * element * tokens * heads * model.head_dim
    return total


def softmax_bytes(model: ModelSpec, plan: ParallelPlan, tokens_local: float) -> float:
    """Forward HBM traffic of unfused attention's s x s tensors on one TP rank (bytes).

    Per score element (bf16): QKᵀ writes it (2), softmax reads and writes it (2 + 2), AV reads
    the probabilities (2); with dropout, the mask (1) and dropped probabilities (2) are written too.
    """
    per_element = 8 + (3 if model.dropout else 0)
    return per_element * model.num_heads / plan.tp * tokens_local * model.seq_len


def attention_core_ops(shape: LayerShape, layer: int, kind: Kind, name: str, factor: int = 1) -> tuple[Op, ...]:
    """The attention core: one fused (flash) kernel, or batched QKᵀ (s x d times d x s) and AV
    (s x s times s x d) matmuls, one per local head and sequence, plus the unfused softmax's
    memory traffic. ``factor`` scales the work (2 for backward: two products per forward one); the
    fused kernel's ``rate`` is its pass's (:func:`schedules.attention_kernels.kernel_rate`), its
    shape (query tokens per sequence on this rank, the sequence, the head dimension, sequences x
    local heads) and ``causal`` what the pricing's shape rate reads
    (:func:`schedules.attention_kernels.fused_attention_rate`)."""
    if shape.softmax_bytes == 0:
        rate = kernel_rate(shape.attention_kernel, backward=factor > 1)
        return (Op(Lane.COMPUTE, kind, name, OpClass.ATTENTION, flops=factor * shape.attention, layer=layer, rate=rate,
                   causal=shape.causal, m=round(shape.seq_len / shape.cp), n=shape.seq_len, k=shape.head_dim,
                   batch=shape.attention_batch),)
    s, d, b = shape.seq_len, shape.head_dim, factor * shape.attention_batch
    half = factor * shape.attention / 2
    return (Op(Lane.COMPUTE, kind, name + ".scores", OpClass.GEMM, flops=half, layer=layer, m=s, n=s, k=d, batch=b),
            Op(Lane.COMPUTE, kind, name + ".softmax", OpClass.ACTIVATION, bytes=factor * shape.softmax_bytes, layer=layer),
            Op(Lane.COMPUTE, kind, name + ".values", OpClass.GEMM, flops=half, layer=layer, m=s, n=d, k=s, batch=b))


def forward_ops(plan: ParallelPlan, shape: LayerShape, layer: int, recompute: bool = False) -> tuple[Op, ...]:
    """Forward of one block (``recompute``: the same work redone inside a backward task)."""
    kind = Kind.FWD
    tag = ".recompute" if recompute else ""
    return (
        *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "attn", backward=False),
                 tuple(mm.forward(kind, layer, tag) for mm in shape.qkv), comm_first=True),
        *shape.ffn.rope(kind, layer, tag),  # an MoE model's unfused RoPE
        *attention_core_ops(shape, layer, kind, f"L{layer}.attn{tag}"),
        *cp_ops(plan, shape.kv_block_bytes, layer, factor=1),
        *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "attn", backward=False), (shape.out.forward(kind, layer, tag),),
                 comm_first=False),
        shape.elementwise_op(kind, f"L{layer}.norm_res{tag}", layer),
        *shape.ffn.forward(plan, shape, layer, tag),
        shape.elementwise_op(kind, f"L{layer}.act_res{tag}", layer),
    )


def backward_input_ops(plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind = Kind.BWD_INPUT) -> tuple[Op, ...]:
    """Input-gradient half of one block's backward (B), in backward order, with its TP traffic."""
    return (
        shape.elementwise_op(kind, f"L{layer}.act_res.dgrad", layer, backward=True),
        *shape.ffn.backward_input(plan, shape, layer, kind),
        shape.elementwise_op(kind, f"L{layer}.norm_res.dgrad", layer, backward=True),
        *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "attn", backward=True), (shape.out.dgrad(kind, layer),),
                 comm_first=True),
        *attention_core_ops(shape, layer, kind, f"L{layer}.attn.bwd", factor=2),
        *cp_ops(plan, shape.kv_block_bytes, layer, factor=2),
        *shape.ffn.rope(kind, layer, backward=True),
        *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "attn", backward=True),
                 tuple(mm.dgrad(kind, layer) for mm in shape.qkv), comm_first=False),
    )


def backward_weight_ops(plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind = Kind.BWD_WEIGHT) -> tuple[Op, ...]:
    """Weight-gradient half of one block's backward (W); with SP the sharded inputs are re-gathered."""
    regather: tuple[Op, ...] = ()
    if plan.tp > 1 and plan.sequence_parallel and not _sac_regathers(plan, shape):
        regather = (Op(Lane.TP, Kind.ALL_GATHER, f"L{layer}.sp_regather", OpClass.ALL_GATHER,
                       bytes=2 * shape.hidden_bytes, dim=TP, layer=layer, concurrent=True),)
    bias = (Op(Lane.COMPUTE, kind, f"L{layer}.bias_grad", OpClass.ACTIVATION, bytes=shape.bias_grad_bytes, layer=layer),
            ) if shape.bias_grad_bytes else ()
    return (
        *shape.ffn.backward_weight(kind, layer),
        *regather,
        shape.out.wgrad(kind, layer),
        *(mm.wgrad(kind, layer) for mm in shape.qkv),
        *bias,
    )


def recompute_ops(plan: ParallelPlan, shape: LayerShape, layer: int) -> tuple[Op, ...]:
    """Recomputation at the start of a block's backward: the whole forward (full), or what the
    plan's selective mode does not keep (``plan.selective_recompute``):

    - "attention" (Megatron-LM, Korthikanti et al. 2022 §5): the attention core, whose s x s
      tensors are not stored; nothing with flash attention, which stores none.
    - "alternate-matmul" (torchtitan's per-op SAC, ``parallelize_llama.py`` ``_custom_policy``:
      it saves the outputs of matmuls, attention and reduce-scatters except every second matmul):
      every second forward matmul and all the element-wise work; with sequence parallelism also
      the all-gathers of the attention's and the (dense) MLP's inputs, which ``_save_list`` leaves
      out (it lists ``_c10d_functional.reduce_scatter_tensor`` but no all-gather: torchtitan
      parallelisms/parallelize_llama.py@9dec370, models/llama3/parallelize_llama.py@820504e),
      so the recomputation runs them again (:func:`_sac_regathers`).
    - "layernorm-moe-act" (Megatron-Core ``--recompute-modules layernorm moe_act``): the norms
      not fused into a linear (the pre-MLP norm of an MoE layer, ``pre_mlp_layernorm``) and the
      experts' activation (``TEGroupedMLP``'s checkpointed ``bias_act_func``, clamp included):
      :meth:`schedules.moe_ops.MoEShape.act_recompute`; nothing for a dense layer.
    """
    if plan.recompute == "full":
        return forward_ops(plan, shape, layer, recompute=True)
    if plan.recompute != "selective":
        return ()
    if plan.selective_recompute == "layernorm-moe-act":
        return shape.ffn.act_recompute(layer)
    if plan.selective_recompute == "alternate-matmul":
        matmuls = (*shape.qkv, shape.out, *shape.ffn.matmuls())
        again = [mm.forward(Kind.FWD, layer, ".recompute") if i % 2 else None for i, mm in enumerate(matmuls)]
        attn = tuple(op for op in again[:len(shape.qkv) + 1] if op is not None)
        ffn = tuple(op for op in again[len(shape.qkv) + 1:] if op is not None)
        gathers = {where: tuple(dataclasses.replace(op, name=f"{op.name}.recompute")
                                for op in sp_gather(plan, shape.hidden_bytes, layer, where, backward=False))
                   for where in ("attn", "mlp")}
        return (*beside(plan, gathers["attn"], attn, comm_first=True),
                shape.elementwise_op(Kind.FWD, f"L{layer}.norm_res.recompute", layer),
                *beside(plan, gathers["mlp"] if shape.ffn.recomputes_sp_gathers else (), ffn, comm_first=True),
                shape.elementwise_op(Kind.FWD, f"L{layer}.act_res.recompute", layer))
    if not plan.flash_attention:
        return attention_core_ops(shape, layer, Kind.FWD, f"L{layer}.attn.recompute")
    return ()


def _sac_regathers(plan: ParallelPlan, shape: LayerShape) -> bool:
    """torchtitan's per-op SAC under sequence parallelism recomputes a dense block's two input
    all-gathers (not in ``_save_list``), and its weight gradients use those recomputed inputs,
    so the backward gathers nothing again beside them (no ``sp_regather``)."""
    return (plan.recompute == "selective" and plan.selective_recompute == "alternate-matmul" and plan.tp > 1
            and plan.sequence_parallel and shape.ffn.recomputes_sp_gathers)


def backward_ops(plan: ParallelPlan, shape: LayerShape, layer: int, split: bool) -> tuple[Op, ...]:
    """Backward of one block: recompute + B (+ W unless the schedule runs W separately)."""
    kind = Kind.BWD_INPUT if split else Kind.BWD
    ops = recompute_ops(plan, shape, layer) + backward_input_ops(plan, shape, layer, kind)
    if not split:
        ops += backward_weight_ops(plan, shape, layer, kind)
    return ops
