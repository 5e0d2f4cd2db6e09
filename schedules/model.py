"""Decoder-only transformer model specs and their presets.

A :class:`ModelSpec` holds the architecture only (no parallelism, no hardware). FLOPs live in
:mod:`schedules.flops`, memory in :mod:`schedules.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid, require_choice, require_positive_int, unknown_name
from schedules.moe import MoESpec, moe_spec, total_params

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
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_len"):
            require_positive_int(name, getattr(self, name))
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
    def layer_params(self) -> int:
        """Parameters of one transformer block (dense models; MoE: ``schedules.moe.layer_params``)."""
        if self.moe is not None:
            raise invalid("model", self.name, "has MoE layers, which differ: use schedules.moe.layer_params")
        h, kv, f = self.hidden_size, self.kv_size, self.ffn
        attention = h * (h + 2 * kv) + h * h
        mlp = (self.ffn_inputs + 1) * h * f
        biases = (h + 2 * kv + h + self.ffn_inputs * f + h) if self.bias else 0
        norms = 2 * self.norm_params()
        return attention + mlp + biases + norms

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
        if self.moe is not None:
            return total_params(self)
        return self.num_layers * self.layer_params() + self.embedding_params() + self.head_params()


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> ModelSpec:
    """GPT-3 style model as in Megatron-LM's scaling studies (GELU, 4h MLP, learned positions)."""
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                     vocab_size=vocab, seq_len=seq)


def _llama(name: str, layers: int, hidden: int, heads: int, ffn: int, seq: int = 8192) -> ModelSpec:
    """Llama-3 style model (GQA with 8 KV heads, SwiGLU, RMSNorm, RoPE, no biases, no dropout)."""
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                     num_kv_heads=8, ffn_hidden_size=ffn, ffn_kind="swiglu", vocab_size=128256,
                     seq_len=seq, norm="rmsnorm", position_embedding="rope", bias=False,
                     dropout=False)


# Sources: Narayanan et al. 2021 (Megatron-LM, Table 1: 1.7B ... 1T, seq 2048, vocab 51200);
# Brown et al. 2020 (GPT-3 175B); Llama 3 paper, Table 3 (8B/70B/405B); nanoGPT's GPT-2 124M.
_PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _gpt("gpt3-1.7b", 24, 2304, 24),
        _gpt("gpt3-3.6b", 30, 3072, 32),
        _gpt("gpt3-7.5b", 36, 4096, 32),
        _gpt("gpt3-18b", 40, 6144, 48),
        _gpt("gpt3-39b", 48, 8192, 64),
        _gpt("gpt3-76b", 60, 10240, 80),
        _gpt("gpt3-145b", 80, 12288, 96),
        _gpt("gpt3-175b", 96, 12288, 96),
        _gpt("gpt3-310b", 96, 16384, 128),
        _gpt("gpt3-530b", 105, 20480, 128),
        _gpt("gpt3-1t", 128, 25600, 160),
        _llama("llama3-8b", 32, 4096, 32, 14336),
        _llama("llama3-70b", 80, 8192, 64, 28672),
        _llama("llama3-405b", 126, 16384, 128, 53248),
        ModelSpec(name="nanogpt-124m", num_layers=12, hidden_size=768, num_heads=12,
                  vocab_size=50304, seq_len=1024, tied_embeddings=True, dropout=False),
        # Tiny models for tests and CPU training runs.
        ModelSpec(name="tiny", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2,
                  ffn_hidden_size=176, ffn_kind="swiglu", vocab_size=256, seq_len=32,
                  norm="rmsnorm", position_embedding="rope", bias=False, dropout=False),
        ModelSpec(name="tiny-gpt", num_layers=4, hidden_size=64, num_heads=4, vocab_size=256,
                  seq_len=32, dropout=False),
        ModelSpec(name="small", num_layers=8, hidden_size=256, num_heads=8, num_kv_heads=4,
                  ffn_hidden_size=704, ffn_kind="swiglu", vocab_size=1024, seq_len=128,
                  norm="rmsnorm", position_embedding="rope", bias=False, dropout=False),
        # Half the layers of "small" at twice the width: matmul-heavier (validation suite).
        ModelSpec(name="small-wide", num_layers=4, hidden_size=512, num_heads=8, num_kv_heads=4,
                  ffn_hidden_size=1408, ffn_kind="swiglu", vocab_size=1024, seq_len=128,
                  norm="rmsnorm", position_embedding="rope", bias=False, dropout=False),
    )
}


def model_presets() -> dict[str, ModelSpec]:
    """All model presets by name (a copy; safe to mutate)."""
    return dict(_PRESETS)


def get_model(name: str) -> ModelSpec:
    """Look a model preset up by name (dense, or an MoE preset of :mod:`schedules.moe_presets`);
    the error lists the valid names."""
    from schedules.moe_presets import moe_presets  # it imports this module

    found = _PRESETS.get(name) or moe_presets().get(name)
    if found is None:
        raise unknown_name("model", name, [*_PRESETS, *moe_presets()])
    return found
