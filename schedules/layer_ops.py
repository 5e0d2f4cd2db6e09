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
from typing import TYPE_CHECKING

from core.groups import TP
from core.taskgraph import Op
from core.vocab import GemmRole, Kind, Lane, OpClass, Runtime
from schedules.attention_kernels import kernel_rate
from schedules.flops import layer_flops
from schedules.layer_comm import beside, cp_ops, sp_gather, tp_ops
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan

if TYPE_CHECKING:
    from schedules.moe_ops import MoEShape

ACT_BYTES = 2  # bf16 activations

# Memory passes of one block's element-wise pieces, (forward, backward): reads + writes, in
# elements of the tensor each piece works on ([tokens, h] for norms, residual adds and dropout;
# [tokens, ffn/tp] for the activation function, counted on its output; q and k for RoPE).
# "fused": the kernels Megatron-LM / Transformer Engine run (a norm reads x and writes y, its
# backward reads dy and x and writes dx; SwiGLU reads gate and up and writes the product, its
# backward reads dout, gate and up and writes both gradients; a residual add reads two and
# writes one, and so does the sum of the two gradient flows where its branches meet; dropout
# backward reads dy and a 1-byte mask and writes dx; RoPE reads and writes q and k).
# "eager": PyTorch's composite ops and their autograd formulas, as the included trainer runs
# them (framework="torch"): F.rms_norm is pow (2), mean (1), mul by rstd (2) and by the weight
# (2) = 7 passes; backward: MulBackward0 x2 (input gradient 2 + weight/rstd gradient product and
# sum 4, each), MeanBackward1 (1), PowBackward0 (5) and the sum of the two gradients of x (3) = 21.
# silu(gate) * up: silu 2 + mul 3 = 5; backward MulBackward0 (two products, 3 each) and
# SiluBackward0 (3) = 9. RoPE as x1*cos - x2*sin and x1*sin + x2*cos over the two halves, then
# cat: 9 passes; backward: the four MulBackward0 (1 each), SubBackward0's negation (1), the
# sums of each half's two gradients (1.5 each) and the cat of the halves (2) = 10.
# LayerNorm, GELU and dropout are single native ops with native backward kernels in both.
ELEMENTWISE_PASSES: dict[str, dict[str, tuple[float, float]]] = {
    "fused": {"layernorm": (2, 3), "rmsnorm": (2, 3), "residual": (3, 3), "swiglu": (3, 5),
              "gelu": (2, 3), "dropout": (3, 2.5), "rope": (2, 2)},
    "eager": {"layernorm": (2, 3), "rmsnorm": (7, 21), "residual": (3, 3), "swiglu": (5, 9),
              "gelu": (2, 3), "dropout": (3, 2.5), "rope": (9, 10)},
}


OPMATH_BYTES = 4
"""Bytes of the fp32 "opmath" type eager RMSNorms compute in when the activations are 16-bit."""


def eager_rmsnorm_passes(element_bytes: int) -> tuple[float, float]:
    """Memory passes (in elements of ``element_bytes``) of an eager RMSNorm, (forward, backward).

    Every eager RMSNorm of the stacks modelled upcasts a 16-bit input to fp32, normalises, casts
    back and then scales by the weight: torchtitan's ``RMSNorm`` (models/norms.py,
    ``self._norm(x.float()).type_as(x) * self.weight``), fms-fsdp's ``LayerNormParameterized``
    (``use_high_precision_pow``), Hugging Face's ``LlamaRMSNorm`` (``hidden_states.to(torch.float32)``)
    and ATen's composite ``rms_norm`` ("upcast is needed for fp16 and bf16",
    aten/src/ATen/native/layer_norm.cpp ``rms_norm_composite``). Per element, with o = 4 bytes and
    e the activation's bytes (the aten ops autograd runs, counted by
    tests/schedules/test_eager_rmsnorm.py): forward x.float() (e + o), pow (2o), mean (o), mul by
    the rstd (2o), type_as (o + e), mul by the weight (2e) = 36 bytes at e = 2; backward the
    weight's MulBackward0 (6e), the two casts' ToCopyBackward0 (e + o each) and, in fp32, the
    rstd's MulBackward0 (6o), MeanBackward1 (o: a broadcast read and a write), PowBackward0 (7o:
    x.pow(1), times 2, times the gradient) and the sum of x's two gradients (3o) = 92 bytes.
    fp32 activations (the CPU trainer's F.rms_norm): :data:`ELEMENTWISE_PASSES`."""
    if element_bytes >= OPMATH_BYTES:
        return ELEMENTWISE_PASSES["eager"]["rmsnorm"]
    e, o = element_bytes, OPMATH_BYTES
    casts = 2 * (e + o)
    return (5 * o + 2 * e + casts) / e, (6 * e + 17 * o + casts) / e


def elementwise_passes(plan: ParallelPlan) -> dict[str, tuple[float, float]]:
    """:data:`ELEMENTWISE_PASSES` of the plan's kernels (``plan.fused_elementwise``), the eager
    RMSNorm's at the plan's activation size (:func:`eager_rmsnorm_passes`)."""
    if plan.fused_elementwise:
        return ELEMENTWISE_PASSES["fused"]
    return {**ELEMENTWISE_PASSES["eager"], "rmsnorm": eager_rmsnorm_passes(plan.element_bytes)}


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


@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """Per-GPU sizes of one block's work for one micro-batch (bytes and FLOPs)."""

    tokens_local: float  # tokens of the micro-batch held by this CP rank
    hidden_bytes: float  # one full [s_local, b, h] bf16 activation (before any TP/SP split)
    kv_block_bytes: float  # K and V of this CP rank's tokens for this TP rank's heads
    qkv: tuple[Matmul, ...]  # the attention's input projections: one fused QKV, or q, k, v
    out: Matmul
    fc1: tuple[Matmul, ...]  # the MLP's input projection(s): up and gate fused, or each
    fc2: Matmul  # the MLP's output projection
    attention: float  # executed attention FLOPs (causal half when flash + causal)
    attention_batch: int  # (micro-batch x local heads) score matrices of the attention core
    seq_len: int
    head_dim: int
    elementwise_bytes: float  # forward memory traffic of the element-wise pieces
    elementwise_bwd_bytes: float  # their backward's
    softmax_bytes: float  # HBM traffic of the unfused s x s softmax/dropout (0 with flash attention)
    attention_kernel: str = "flash2"  # the fused kernel (schedules.attention_kernels)
    moe: MoEShape | None = None  # an MoE layer's feed-forward part (it replaces fc1/fc2)
    causal: bool = False  # the fused kernel runs under a causal mask (Op.causal)
    cp: int = 1  # context-parallel ranks a sequence's attention is split over

    @property
    def gemm_qkv(self) -> float:
        return sum(mm.flops for mm in self.qkv)

    @property
    def gemm_out(self) -> float:
        return self.out.flops

    @property
    def gemm_mlp(self) -> float:
        return sum(mm.flops for mm in self.fc1) + self.fc2.flops


FUSED_PROJECTIONS: dict[str, bool] = {Runtime.MEGATRON: True, Runtime.TORCH: False}
"""Whether a runtime runs the attention's q, k, v projections as one matmul and SwiGLU's gate
and up projections as one: Megatron-LM / Transformer Engine do (``linear_qkv``,
``linear_fc1`` of twice the width); the included trainer keeps ``wq``, ``wk``, ``wv`` and
``w1``, ``w3`` separate (``profiler/trainer/model.py``), as torchtitan's Llama does."""


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
    fl = layer_flops(model, plan.microbatch_size)
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
        out=Matmul(name="proj", m=t, n=h, k=round(h / tp), flops=fl.gemm_out / split), fc1=fc1,
        fc2=Matmul(name="fc2", m=t, n=h, k=round(f / tp), flops=fl.gemm_mlp / split - fc1_flops),
        attention=fl.attention / split * causal_share,
        attention_batch=max(1, round(plan.microbatch_size * model.num_heads / tp)),
        seq_len=model.seq_len, head_dim=model.head_dim,
        elementwise_bytes=_elementwise_bytes(model, plan, tokens, backward=False),
        elementwise_bwd_bytes=_elementwise_bytes(model, plan, tokens, backward=True),
        softmax_bytes=0.0 if plan.flash_attention else _softmax_bytes(model, plan, tokens),
        attention_kernel=plan.attention_kernel, causal=causal_share < 1.0, cp=plan.cp,
    )


def _elementwise_bytes(model: ModelSpec, plan: ParallelPlan, tokens: float, backward: bool) -> float:
    """Memory traffic of one block's element-wise pieces on one (tp, cp) rank, bytes: two norms,
    two residual adds, the activation function, two dropouts (if any) and RoPE on q and k (if
    used), at :func:`elementwise_passes`."""
    passes = elementwise_passes(plan)
    side = 1 if backward else 0
    element = plan.element_bytes
    hidden = element * tokens * model.hidden_size / (plan.tp if plan.sequence_parallel else 1)
    total = (2 * passes[model.norm][side] + 2 * passes["residual"][side]
             + (2 * passes["dropout"][side] if model.dropout else 0.0)) * hidden
    total += passes[model.ffn_kind][side] * element * tokens * model.ffn / plan.tp
    if model.position_embedding == "rope":
        heads = model.num_heads / plan.tp + max(1, model.kv_heads // plan.tp)
        total += passes["rope"][side] * element * tokens * heads * model.head_dim
    return total


def _softmax_bytes(model: ModelSpec, plan: ParallelPlan, tokens_local: float) -> float:
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
    local heads) and ``causal`` what the pricing's causal rate reads
    (:func:`schedules.attention_kernels.causal_rate`)."""
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
    ew = shape.elementwise_bytes / 2
    return (
        *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "attn", backward=False),
                 tuple(mm.forward(kind, layer, tag) for mm in shape.qkv), comm_first=True),
        *(shape.moe.rope(kind, layer, tag) if shape.moe is not None else ()),  # an MoE model's unfused RoPE
        *attention_core_ops(shape, layer, kind, f"L{layer}.attn{tag}"),
        *cp_ops(plan, shape.kv_block_bytes, layer, factor=1),
        *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "attn", backward=False), (shape.out.forward(kind, layer, tag),),
                 comm_first=False),
        Op(Lane.COMPUTE, kind, f"L{layer}.norm_res{tag}", OpClass.ACTIVATION, bytes=ew, layer=layer),
        *_mlp_forward(plan, shape, layer, tag),
        Op(Lane.COMPUTE, kind, f"L{layer}.act_res{tag}", OpClass.ACTIVATION, bytes=ew, layer=layer),
    )


def _mlp_forward(plan: ParallelPlan, shape: LayerShape, layer: int, tag: str) -> tuple[Op, ...]:
    """The feed-forward sub-block's forward: the dense MLP, or an MoE layer's (:mod:`schedules.moe_ops`)."""
    if shape.moe is not None:
        return shape.moe.forward(plan, shape, layer, tag)
    kind = Kind.FWD
    return (
        *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=False),
                 tuple(mm.forward(kind, layer, tag) for mm in shape.fc1), comm_first=True),
        *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=False), (shape.fc2.forward(kind, layer, tag),),
                 comm_first=False),
    )


def backward_input_ops(plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind = Kind.BWD_INPUT) -> tuple[Op, ...]:
    """Input-gradient half of one block's backward (B), in backward order, with its TP traffic."""
    ew = shape.elementwise_bwd_bytes
    return (
        Op(Lane.COMPUTE, kind, f"L{layer}.act_res.dgrad", OpClass.ACTIVATION, bytes=ew / 2, layer=layer),
        *(shape.moe.backward_input(plan, shape, layer, kind) if shape.moe is not None else (
            *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "mlp", backward=True), (shape.fc2.dgrad(kind, layer),),
                     comm_first=True),
            *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "mlp", backward=True),
                     tuple(mm.dgrad(kind, layer) for mm in shape.fc1), comm_first=False))),
        Op(Lane.COMPUTE, kind, f"L{layer}.norm_res.dgrad", OpClass.ACTIVATION, bytes=ew / 2, layer=layer),
        *beside(plan, tp_ops(plan, shape.hidden_bytes, layer, "attn", backward=True), (shape.out.dgrad(kind, layer),),
                 comm_first=True),
        *attention_core_ops(shape, layer, kind, f"L{layer}.attn.bwd", factor=2),
        *cp_ops(plan, shape.kv_block_bytes, layer, factor=2),
        *(shape.moe.rope(kind, layer, backward=True) if shape.moe is not None else ()),
        *beside(plan, sp_gather(plan, shape.hidden_bytes, layer, "attn", backward=True),
                 tuple(mm.dgrad(kind, layer) for mm in shape.qkv), comm_first=False),
    )


def backward_weight_ops(plan: ParallelPlan, shape: LayerShape, layer: int, kind: Kind = Kind.BWD_WEIGHT) -> tuple[Op, ...]:
    """Weight-gradient half of one block's backward (W); with SP the sharded inputs are re-gathered."""
    regather: tuple[Op, ...] = ()
    if plan.tp > 1 and plan.sequence_parallel and not _sac_regathers(plan, shape):
        regather = (Op(Lane.TP, Kind.ALL_GATHER, f"L{layer}.sp_regather", OpClass.ALL_GATHER,
                       bytes=2 * shape.hidden_bytes, dim=TP, layer=layer, concurrent=True),)
    mlp = shape.moe.backward_weight(kind, layer) if shape.moe is not None else (
        shape.fc2.wgrad(kind, layer), *(mm.wgrad(kind, layer) for mm in shape.fc1))
    return (
        *mlp,
        *regather,
        shape.out.wgrad(kind, layer),
        *(mm.wgrad(kind, layer) for mm in shape.qkv),
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
        return shape.moe.act_recompute(layer) if shape.moe is not None else ()
    if plan.selective_recompute == "alternate-matmul":
        mlp = shape.moe.matmuls() if shape.moe is not None else (*shape.fc1, shape.fc2)
        matmuls = (*shape.qkv, shape.out, *mlp)
        again = [mm.forward(Kind.FWD, layer, ".recompute") if i % 2 else None for i, mm in enumerate(matmuls)]
        attn = tuple(op for op in again[:len(shape.qkv) + 1] if op is not None)
        ffn = tuple(op for op in again[len(shape.qkv) + 1:] if op is not None)
        gathers = {where: tuple(dataclasses.replace(op, name=f"{op.name}.recompute")
                                for op in sp_gather(plan, shape.hidden_bytes, layer, where, backward=False))
                   for where in ("attn", "mlp")}
        ew = shape.elementwise_bytes / 2
        return (*beside(plan, gathers["attn"], attn, comm_first=True),
                Op(Lane.COMPUTE, Kind.FWD, f"L{layer}.norm_res.recompute", OpClass.ACTIVATION, bytes=ew, layer=layer),
                *beside(plan, gathers["mlp"] if shape.moe is None else (), ffn, comm_first=True),
                Op(Lane.COMPUTE, Kind.FWD, f"L{layer}.act_res.recompute", OpClass.ACTIVATION, bytes=ew, layer=layer))
    if not plan.flash_attention:
        return attention_core_ops(shape, layer, Kind.FWD, f"L{layer}.attn.recompute")
    return ()


def _sac_regathers(plan: ParallelPlan, shape: LayerShape) -> bool:
    """torchtitan's per-op SAC under sequence parallelism recomputes a dense block's two input
    all-gathers (not in ``_save_list``), and its weight gradients use those recomputed inputs,
    so the backward gathers nothing again beside them (no ``sp_regather``)."""
    return (plan.recompute == "selective" and plan.selective_recompute == "alternate-matmul" and plan.tp > 1
            and plan.sequence_parallel and shape.moe is None)


def backward_ops(plan: ParallelPlan, shape: LayerShape, layer: int, split: bool) -> tuple[Op, ...]:
    """Backward of one block: recompute + B (+ W unless the schedule runs W separately)."""
    kind = Kind.BWD_INPUT if split else Kind.BWD
    ops = recompute_ops(plan, shape, layer) + backward_input_ops(plan, shape, layer, kind)
    if not split:
        ops += backward_weight_ops(plan, shape, layer, kind)
    return ops
