"""Mixture-of-experts model presets with sourced dimensions.

Each preset copies its model's public Hugging Face ``config.json`` (address beside it); the
training sequence length is the pre-training length its paper states (Kimi K2: the published
run's). The published total and active parameter counts these reproduce are in
tests/schedules/test_moe_presets.py; for Kimi K2, Qwen3-30B-A3B and GPT-OSS-20B (added with their
NeMo AutoModel rows) the dimensions were read in public copies of the config files and in the
model cards' summaries, not in the files themselves, and the counts are what confirms them.

:func:`schedules.model_presets.get_model` finds these too (the simulator prices their MoE layers with
:mod:`schedules.moe_ops`).
"""

from __future__ import annotations

from typing import Any

from core.errors import unknown_name
from schedules.attention import AttentionSpec
from schedules.model import ModelSpec
from schedules.moe import MoESpec


def _model(**fields: Any) -> ModelSpec:
    """A model as all four are: SwiGLU experts, RMSNorm, RoPE, no dropout."""
    return ModelSpec(ffn_kind="swiglu", norm="rmsnorm", position_embedding="rope", dropout=False,
                     **fields)


def mixtral_8x7b() -> ModelSpec:
    """Mixtral 8x7B: 8 experts, top-2, every layer MoE, Llama-style GQA attention.
    huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json; 32k context
    (Jiang et al. 2024, "Mixtral of Experts", §2)."""
    return _model(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000, seq_len=32768,
                     bias=False, moe=MoESpec(num_experts=8, top_k=2, expert_ffn_size=14336))


def qwen3_235b_a22b() -> ModelSpec:
    """Qwen3-235B-A22B: 128 experts, top-8, every layer MoE (decoder_sparse_step 1, no
    mlp_only_layers), 64 query heads of 128 (wider than h/heads = 64) with q/k RMSNorm.
    huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json; 4k pre-training sequences
    (Qwen3 Technical Report, §3.2, stages 1-2)."""
    moe = MoESpec(num_experts=128, top_k=8, expert_ffn_size=1536,
                  attention=AttentionSpec(head_dim=128, qk_norm=True))
    return _model(name="qwen3-235b-a22b", num_layers=94, hidden_size=4096, num_heads=64,
                     num_kv_heads=4, ffn_hidden_size=12288, vocab_size=151936, seq_len=4096,
                     bias=False, moe=moe)


def _gpt_oss(name: str, layers: int, experts: int) -> ModelSpec:
    """The GPT-OSS layer: 64 query heads of 64 (h = 2880), 8 KV heads, top-4 experts of width
    2880, biases on attention, router and experts, a learned sink per head, the experts'
    activation inputs clamped to 7 (``swiglu_limit``), YaRN-scaled RoPE (``rope_scaling``: yarn,
    factor 32); 4k pre-training sequences (``initial_context_length`` 4096)."""
    moe = MoESpec(num_experts=experts, top_k=4, expert_ffn_size=2880, router_bias=True,
                  expert_bias=True, attention=AttentionSpec(head_dim=64, sinks=True), activation_clamp=7.0,
                  rope_scaling="yarn")
    return _model(name=name, num_layers=layers, hidden_size=2880, num_heads=64,
                     num_kv_heads=8, ffn_hidden_size=2880, vocab_size=201088, seq_len=4096,
                     bias=True, moe=moe)


def gpt_oss_120b() -> ModelSpec:
    """GPT-OSS-120B: 128 experts, 36 layers, every layer MoE (:func:`_gpt_oss`).
    huggingface.co/openai/gpt-oss-120b/blob/main/config.json."""
    return _gpt_oss("gpt-oss-120b", layers=36, experts=128)


def gpt_oss_20b() -> ModelSpec:
    """GPT-OSS-20B: 32 experts, 24 layers, every layer MoE (:func:`_gpt_oss`).
    huggingface.co/openai/gpt-oss-20b/blob/main/config.json (num_local_experts 32,
    num_hidden_layers 24; the rest as the 120B's)."""
    return _gpt_oss("gpt-oss-20b", layers=24, experts=32)


def _deepseek_v3_architecture(name: str, heads: int, experts: int, dense_layers: int, vocab: int) -> ModelSpec:
    """DeepSeek-V3's architecture: 61 layers, h = 7168, MLA attention (q_lora_rank 1536,
    kv_lora_rank 512, query/key heads of 128 + 64 RoPE dims, values of 128), dense layers of
    18432 first, then MoE layers of ``experts`` routed experts of width 2048 (top-8) plus one
    shared expert; the router's per-expert score bias (``e_score_correction_bias``) counts as
    ``router_bias``; 4k pre-training sequences."""
    mla = AttentionSpec(head_dim=192, v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536,
                        qk_rope_head_dim=64)
    moe = MoESpec(num_experts=experts, top_k=8, expert_ffn_size=2048, num_shared_experts=1,
                  first_dense_layers=dense_layers, router_bias=True, attention=mla)
    return _model(name=name, num_layers=61, hidden_size=7168, num_heads=heads,
                     num_kv_heads=heads, ffn_hidden_size=18432, vocab_size=vocab, seq_len=4096,
                     bias=False, moe=moe)


def deepseek_v3() -> ModelSpec:
    """DeepSeek-V3 (main model, without its multi-token-prediction module): 128 heads, 3 dense
    layers then 58 MoE layers of 256 routed experts (:func:`_deepseek_v3_architecture`).
    huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json; 4k pre-training sequences
    (DeepSeek-V3 Technical Report, §4.2)."""
    return _deepseek_v3_architecture("deepseek-v3", heads=128, experts=256, dense_layers=3, vocab=129280)


def kimi_k2() -> ModelSpec:
    """Kimi K2: DeepSeek-V3's architecture (:func:`_deepseek_v3_architecture`) with 384 routed
    experts, 64 attention heads and one dense first layer. moonshotai/Kimi-K2-Base config.json
    (``model_type`` kimi_k2: hidden 7168, 61 layers, 64 heads, kv_lora_rank 512, q_lora_rank
    1536, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 384,
    n_shared_experts 1, num_experts_per_tok 8, moe_intermediate_size 2048, intermediate_size
    18432, first_k_dense_replace 1, vocab 163840); 4k sequences, as NeMo AutoModel's benchmark
    runs it (its pre-training length in the Kimi K2 report, arXiv:2507.20534, is not checked here)."""
    return _deepseek_v3_architecture("kimi-k2", heads=64, experts=384, dense_layers=1, vocab=163840)


def qwen3_30b_a3b() -> ModelSpec:
    """Qwen3-30B-A3B: 128 experts, top-8, every layer MoE, 32 query heads of 128 (wider than
    h/heads = 64) with q/k RMSNorm, 4 KV heads. huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/
    config.json (hidden 2048, 48 layers, moe_intermediate_size 768, vocab 151936); 4k
    pre-training sequences (Qwen3 Technical Report, §3.2, stages 1-2)."""
    moe = MoESpec(num_experts=128, top_k=8, expert_ffn_size=768,
                  attention=AttentionSpec(head_dim=128, qk_norm=True))
    return _model(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_heads=32,
                     num_kv_heads=4, ffn_hidden_size=6144, vocab_size=151936, seq_len=4096,
                     bias=False, moe=moe)


_PRESETS = {m.name: m for m in (mixtral_8x7b(), qwen3_235b_a22b(), gpt_oss_120b(), deepseek_v3(), kimi_k2(),
                                  qwen3_30b_a3b(), gpt_oss_20b())}


def moe_presets() -> dict[str, ModelSpec]:
    """The MoE model presets by name (a copy)."""
    return dict(_PRESETS)


def get_moe_model(name: str) -> ModelSpec:
    """An MoE preset by name; the error lists the valid names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("MoE model", name, _PRESETS) from None
