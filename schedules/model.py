"""Decoder-only transformer model specs.

A :class:`ModelSpec` holds the architecture only (no parallelism, no hardware). FLOPs live in
:mod:`schedules.flops`, memory in :mod:`schedules.memory`; the presets (dense and MoE) in
:mod:`schedules.model_presets`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid, require_bool, require_choice, require_positive_int
from schedules.moe import MoESpec, moe_spec, total_params
from schedules.moe import layer_params as block_params

FFN_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rope")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Architecture of a decoder-only transformer.

    Attributes:
        name: display name (a preset name or "custom").
        num_layers: transformer blocks.
        hidden_size: model width h.
        num_heads: attention (query) heads a.
        num_kv_heads: key/value heads (GQA); equals ``num_heads`` for multi-head attention.
        ffn_hidden_size: MLP inner width f.
        ffn_kind: "gelu" (2 matrices) or "swiglu" (3 matrices).
        vocab_size: vocabulary V (already padded as the framework pads it).
        seq_len: training sequence length s in tokens.
        norm: "layernorm" (weight + bias) or "rmsnorm" (weight only).
        position_embedding: "learned" (a seq_len x h table) or "rope" (no parameters).
        tied_embeddings: output projection shares the input embedding matrix.
        bias: linear layers carry biases (GPT-2/3 style).
        fused_qkv: the attention's query, key and value projections are one Linear module
            (Megatron's ``query_key_value``) or three (Hugging Face BERT/RoBERTa ``query``, ``key``,
            ``value``); what a framework that gathers weights module by module (DeepSpeed ZeRO-3)
            gathers, :func:`schedules.build.zero3_fetch.layer_modules`.
        dropout: the model applies dropout (stores dropout masks, Korthikanti et al. 2022).
        causal: causal attention (flash kernels skip the masked half of the work).
        moe: mixture-of-experts layers (:class:`schedules.moe.MoESpec`); None: a dense model.
    """

    name: str = "custom"
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    ffn_kind: str = "gelu"
    vocab_size: int
    seq_len: int
    norm: str = "layernorm"
    position_embedding: str = "learned"
    tied_embeddings: bool = False
    bias: bool = True
    fused_qkv: bool = True
    dropout: bool = True
    causal: bool = True
    moe: MoESpec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise invalid("name", self.name, "expected a text")
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_len"):
            require_positive_int(name, getattr(self, name))
        for name in ("tied_embeddings", "bias", "fused_qkv", "dropout", "causal"):
            require_bool(name, getattr(self, name))
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.ffn_hidden_size is None:
            object.__setattr__(self, "ffn_hidden_size", 4 * self.hidden_size)
        require_positive_int("num_kv_heads", self.num_kv_heads)
        require_positive_int("ffn_hidden_size", self.ffn_hidden_size)
        require_choice("ffn_kind", self.ffn_kind, FFN_KINDS)
        require_choice("norm", self.norm, NORM_KINDS)
        require_choice("position_embedding", self.position_embedding, POSITION_KINDS)
        if self.hidden_size % self.num_heads:
            raise invalid("hidden_size", self.hidden_size, f"must be divisible by num_heads={self.num_heads}")
        if self.num_heads % self.kv_heads:
            raise invalid("num_kv_heads", self.num_kv_heads, f"must divide num_heads={self.num_heads}")
        object.__setattr__(self, "moe", moe_spec(self.moe))

    @property
    def kv_heads(self) -> int:
        """Key/value heads as an int (``num_kv_heads`` after defaulting)."""
        return int(self.num_kv_heads or self.num_heads)

    @property
    def ffn(self) -> int:
        """MLP inner width as an int (``ffn_hidden_size`` after defaulting)."""
        return int(self.ffn_hidden_size or 4 * self.hidden_size)

    @property
    def ffn_inputs(self) -> int:
        """Input projections of the feed-forward block: 2 for SwiGLU (gate and up), 1 for GELU."""
        return 2 if self.ffn_kind == "swiglu" else 1

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of the K (or V) projection output: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    # ---- parameter counts (elements) ----
    def layer_params(self, layer: int = 0, *, active: bool = False) -> int:
        """Parameters of transformer block ``layer`` (0-based), dense or MoE: its two norms, its
        attention and its feed-forward part (``active``: only the ``top_k`` routed experts one
        token uses), :func:`schedules.moe.layer_params`."""
        return block_params(self, layer, active=active)

    def norm_params(self) -> int:
        """Parameters of one normalization layer."""
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def embedding_params(self) -> int:
        """Input embedding (+ learned positions) parameters."""
        positions = self.seq_len * self.hidden_size if self.position_embedding == "learned" else 0
        return self.vocab_size * self.hidden_size + positions

    def head_params(self) -> int:
        """Final norm plus the output projection (zero extra if tied)."""
        output = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params() + output

    def num_params(self) -> int:
        """Total parameters (elements)."""
        return total_params(self)
