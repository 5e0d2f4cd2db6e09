"""Model presets by name: the dense models below (sources beside them) and the MoE models of
:mod:`schedules.moe_presets`; :func:`get_model` finds either."""

from __future__ import annotations

from core.errors import unknown_name
from schedules.model import ModelSpec
from schedules.moe_presets import moe_presets


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
    found = _PRESETS.get(name) or moe_presets().get(name)
    if found is None:
        raise unknown_name("model", name, [*_PRESETS, *moe_presets()])
    return found
