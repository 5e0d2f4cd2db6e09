"""FLOPs of a transformer block and of the embedding/loss, per micro-batch (per layer, dense or
MoE, and per step: :mod:`schedules.layer_kinds`).

Counting follows Narayanan et al. 2021 (Megatron-LM, Appendix): a (m x k)·(k x n) matmul costs
2mkn FLOPs; the attention score and value matmuls count the full s x s matrix (model FLOPs, as
Megatron's MFU does), and backward costs twice the forward (input gradient + weight gradient).
With f = 4h and MHA the per-layer total reduces to 72·b·s·h²·(1 + s/(6h)), the paper's formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedules.attention import attention_core_flops, projection_flops
from schedules.model import ModelSpec
from schedules.moe import attention_of, is_moe_layer, moe_of


@dataclass(frozen=True, kw_only=True)
class LayerFlops:
    """Forward FLOPs of one transformer block for one micro-batch (whole layer, before TP).

    ``gemm_*`` are weight matmuls (their backward splits into input- and weight-gradient halves);
    ``attention`` is the QKᵀ and AV core (no weights: its backward is all input-gradient).
    """

    gemm_qkv: float
    attention: float
    gemm_out: float
    gemm_mlp: float

    @property
    def gemm(self) -> float:
        """All weight-matmul FLOPs of the block."""
        return self.gemm_qkv + self.gemm_out + self.gemm_mlp

    @property
    def forward(self) -> float:
        """Total forward FLOPs of the block."""
        return self.gemm + self.attention

    @property
    def backward_input(self) -> float:
        """Backward FLOPs producing input gradients (one forward's worth of GEMMs + 2x attention)."""
        return self.gemm + 2 * self.attention

    @property
    def backward_weight(self) -> float:
        """Backward FLOPs producing weight gradients (one forward's worth of GEMMs)."""
        return self.gemm

    @property
    def backward(self) -> float:
        """Total backward FLOPs (= 2 x forward)."""
        return self.backward_input + self.backward_weight


def dense_layer_flops(model: ModelSpec, microbatch_size: int) -> LayerFlops:
    """Forward FLOPs of one block of a dense model (all alike) for ``microbatch_size`` sequences
    of ``model.seq_len`` tokens."""
    tokens = microbatch_size * model.seq_len
    h, kv, f, s = model.hidden_size, model.kv_size, model.ffn, model.seq_len
    mlp_matrices = model.ffn_inputs + 1
    return LayerFlops(
        gemm_qkv=2 * tokens * h * (h + 2 * kv),
        attention=2 * 2 * tokens * s * h,  # QKᵀ and AV, full s x s
        gemm_out=2 * tokens * h * h,
        gemm_mlp=2 * mlp_matrices * tokens * h * f,
    )


def logits_flops(model: ModelSpec, microbatch_size: int) -> float:
    """Forward FLOPs of the output projection (hidden -> vocab logits)."""
    return 2.0 * microbatch_size * model.seq_len * model.hidden_size * model.vocab_size


@dataclass(frozen=True, kw_only=True)
class MoEFlops:
    """Forward FLOPs of one MoE layer's feed-forward part (2mkn per GEMM): the router GEMM
    (h -> E) and the shared experts for every token, the MLPs of ``top_k`` experts per token."""

    router: float
    routed_experts: float
    shared_experts: float

    @property
    def total(self) -> float:
        """All forward FLOPs of the MoE feed-forward part."""
        return self.router + self.routed_experts + self.shared_experts


def moe_ffn_flops(model: ModelSpec, tokens: int) -> MoEFlops:
    """Forward FLOPs of the MoE feed-forward part of one layer for ``tokens`` tokens (every
    token reaches its ``top_k`` experts: no capacity drop)."""
    moe = moe_of(model)
    h, mlp_matrices = model.hidden_size, model.ffn_inputs + 1
    return MoEFlops(
        router=2.0 * tokens * h * moe.num_experts,
        routed_experts=2.0 * mlp_matrices * tokens * moe.top_k * h * moe.expert_ffn_size,
        shared_experts=2.0 * mlp_matrices * tokens * moe.num_shared_experts * h * moe.shared_ffn,
    )


def moe_model_layer_flops(model: ModelSpec, tokens: int, layer: int) -> LayerFlops:
    """Forward FLOPs of block ``layer`` of an MoE model for ``tokens`` tokens: its attention
    geometry, dense MLP or MoE part."""
    spec = attention_of(model)
    qkv, out = projection_flops(model, spec, tokens)
    if is_moe_layer(model, layer):
        mlp = moe_ffn_flops(model, tokens).total
    else:
        mlp = 2.0 * (model.ffn_inputs + 1) * tokens * model.hidden_size * model.ffn
    return LayerFlops(gemm_qkv=qkv, attention=attention_core_flops(model, spec, tokens),
                      gemm_out=out, gemm_mlp=mlp)
