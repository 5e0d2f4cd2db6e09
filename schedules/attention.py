"""Attention geometry beyond :class:`schedules.model.ModelSpec`'s h/heads-wide heads: a head width
of its own (Qwen3, GPT-OSS) and DeepSeek's multi-head latent attention (MLA).

ModelSpec's attention has heads of width ``hidden_size / num_heads``. Recent MoE models decouple
the two (Qwen3-235B-A22B: h = 4096, 64 heads of 128) or replace the K/V projections by a shared
low-rank latent (MLA, DeepSeek-V2 paper §2.1, DeepSeek-V3 paper §2.1.1):

    c_q  = RMSNorm(W_DQ x)            (q_lora_rank)       q = W_UQ c_q      (heads x (nope+rope))
    c_kv = RMSNorm(W_DKV x)           (kv_lora_rank)      k_nope, v = W_UKV c_kv  (heads x (nope+v))
    k_rope = W_KR x                   (rope, shared by all heads)
    o = W_O [heads x v]

Training computes MLA this way (the up-projections are not absorbed into the attention), so its
GEMM FLOPs are 2 x its projection weights per token, and its attention core is a QKᵀ over
``head_dim`` (= nope + rope) and an AV over ``v_head_dim`` per head. Counting and FLOPs here are
exact for that computation; nothing is approximated.

Units: parameter counts are elements; FLOPs are per token of the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import invalid, require_positive_int

if TYPE_CHECKING:
    from schedules.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Attention geometry that ModelSpec's h/heads-wide heads cannot state.

    Attributes:
        head_dim: width of one query/key head (MLA: the no-RoPE plus RoPE parts).
        v_head_dim: width of one value head; None means ``head_dim``.
        kv_lora_rank: MLA's K/V latent width; None means ordinary (grouped-query) attention.
        q_lora_rank: MLA's query latent width; None means a full-rank query projection.
        qk_rope_head_dim: MLA's decoupled RoPE key width (one key shared by all heads); 0 otherwise.
        qk_norm: per-head RMSNorm on queries and keys (Qwen3: 2 x head_dim weights).
        sinks: a learned attention-sink logit per query head (GPT-OSS).
    """

    head_dim: int
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qk_norm: bool = False
    sinks: bool = False

    def __post_init__(self) -> None:
        require_positive_int("attention.head_dim", self.head_dim)
        for name in ("v_head_dim", "kv_lora_rank", "q_lora_rank"):
            if getattr(self, name) is not None:
                require_positive_int(f"attention.{name}", getattr(self, name))
        if self.kv_lora_rank is None and (self.q_lora_rank is not None or self.qk_rope_head_dim):
            raise invalid("attention.kv_lora_rank", None,
                          "q_lora_rank and qk_rope_head_dim are MLA fields; set kv_lora_rank too")
        if not 0 <= self.qk_rope_head_dim < self.head_dim:
            raise invalid("attention.qk_rope_head_dim", self.qk_rope_head_dim,
                          f"expected 0 <= value < head_dim={self.head_dim}")

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (K/V from a shared low-rank latent)."""
        return self.kv_lora_rank is not None

    @property
    def v_dim(self) -> int:
        """Width of one value head."""
        return self.v_head_dim or self.head_dim


def projection_shapes(spec: AttentionSpec, h: int, heads: int, kv_heads: int) -> list[tuple[int, int]]:
    """(in, out) of every weight matrix of the attention, in order."""
    qk, v = spec.head_dim, spec.v_dim
    output = (heads * v, h)
    if not spec.is_mla:
        return [(h, heads * qk), (h, kv_heads * qk), (h, kv_heads * v), output]
    rank, rope = int(spec.kv_lora_rank or 0), spec.qk_rope_head_dim
    query = ([(h, spec.q_lora_rank), (spec.q_lora_rank, heads * qk)] if spec.q_lora_rank
             else [(h, heads * qk)])
    return [*query, (h, rank + rope), (rank, heads * (qk - rope + v)), output]


def attention_gemm_params(model: ModelSpec, spec: AttentionSpec) -> int:
    """Weight-matrix elements of one layer's attention (what its GEMMs multiply by)."""
    shapes = projection_shapes(spec, model.hidden_size, model.num_heads, model.kv_heads)
    return sum(n_in * n_out for n_in, n_out in shapes)


def attention_params(model: ModelSpec, spec: AttentionSpec) -> int:
    """All parameters of one layer's attention: matrices, biases (``model.bias``: one per output
    of every projection), MLA latent norms, Qwen3 q/k norms and GPT-OSS sinks."""
    shapes = projection_shapes(spec, model.hidden_size, model.num_heads, model.kv_heads)
    biases = sum(n_out for _, n_out in shapes) if model.bias else 0
    latent_norms = (spec.q_lora_rank or 0) + (spec.kv_lora_rank or 0)
    qk_norms = 2 * spec.head_dim if spec.qk_norm else 0
    sinks = model.num_heads if spec.sinks else 0
    return attention_gemm_params(model, spec) + biases + latent_norms + qk_norms + sinks


def attention_core_flops(model: ModelSpec, spec: AttentionSpec, tokens: int) -> float:
    """Forward FLOPs of QKᵀ and AV for ``tokens`` tokens of ``model.seq_len``-long sequences,
    counting the full s x s matrix as Megatron's model FLOPs do: 2·s·heads·(qk + v) per token."""
    return 2.0 * tokens * model.seq_len * model.num_heads * (spec.head_dim + spec.v_dim)


def projection_flops(model: ModelSpec, spec: AttentionSpec, tokens: int) -> tuple[float, float]:
    """Forward GEMM FLOPs of ``tokens`` tokens through the attention's projections:
    (the input side: Q/K/V or MLA's down- and up-projections, the output projection)."""
    shapes = projection_shapes(spec, model.hidden_size, model.num_heads, model.kv_heads)
    flops = [2.0 * tokens * n_in * n_out for n_in, n_out in shapes]
    return sum(flops[:-1]), flops[-1]
