"""MoE presets against their published total and active parameter counts (within 1%).

Sources of the published numbers (the presets' dimensions come from each model's config.json):
- Mixtral 8x7B: Mistral AI, "Mixtral of experts" (mistral.ai/news/mixtral-of-experts, 2023-12-11):
  "46.7B total parameters but only uses 12.9B parameters per token"; counts the embedding.
- Qwen3-235B-A22B: huggingface.co/Qwen/Qwen3-235B-A22B model card: "Number of Parameters: 235B in
  total and 22B activated; Number of Paramaters (Non-Embedding): 234B".
- GPT-OSS-120B: OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (arXiv:2508.10925), §2.1:
  116.8B total parameters, 5.1B active per token; active counts the unembedding, not the embedding.
- DeepSeek-V3 (main model, without the MTP module): DeepSeek-V3 Technical Report (arXiv:2412.19437):
  671B total, 37B activated per token; README_WEIGHTS.md of deepseek-ai/DeepSeek-V3: "Activation
  parameters: 36.6B (including 0.9B for the output Head)", i.e. the input embedding not counted.
- GPT-OSS-20B: the same model card, Table 1 (20b): 20.91B total, 3.61B active.
- Kimi K2: moonshotai/Kimi-K2 model card (README "Model Summary"): "Total Parameters 1T, Activated
  Parameters 32B", with the dimensions the preset copies (61 layers of which 1 dense, attention
  hidden 7168, MoE hidden 2048 per expert, 64 heads, 384 experts, 8 selected, 1 shared, vocab 160K).
- Qwen3-30B-A3B: huggingface.co/Qwen/Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in
  total and 3.3B activated; Number of Paramaters (Non-Embedding): 29.9B".
The last two state fewer digits; their figures are truncated (Qwen3-235B's card too: 22.19B
activated is its "22B"), so those presets must lie in [published, published + one unit of the
last digit).
"""

from __future__ import annotations

import pytest

from schedules.moe import active_params, moe_layers, total_params
from schedules.moe_presets import get_moe_model, moe_presets

REL = 0.01

# name, published total, published active, whether the publisher's "active" counts the input
# embedding table
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, 12.9e9, True),
    ("qwen3-235b-a22b", 235e9, 22e9, True),
    ("gpt-oss-120b", 116.8e9, 5.1e9, False),
    ("deepseek-v3", 671e9, 36.6e9, False),
    ("gpt-oss-20b", 20.91e9, 3.61e9, False),
]
# name, published total, its last digit's unit, published active, its unit, whether "active"
# counts the input embedding
TRUNCATED = [
    ("kimi-k2", 1e12, 1e12, 32e9, 1e9, True),
    ("qwen3-30b-a3b", 30.5e9, 0.1e9, 3.3e9, 0.1e9, True),
]


@pytest.mark.parametrize(("name", "total", "active", "with_embedding"), PUBLISHED)
def test_total_and_active_params_match_published(name: str, total: float, active: float,
                                                 with_embedding: bool) -> None:
    model = get_moe_model(name)
    assert model.num_params() == pytest.approx(total, rel=REL)
    assert total_params(model) == model.num_params()
    assert active_params(model, input_embedding=with_embedding) == pytest.approx(active, rel=REL)


@pytest.mark.parametrize(("name", "total", "total_unit", "active", "active_unit", "with_embedding"), TRUNCATED)
def test_totals_match_model_cards_to_their_stated_digits(name: str, total: float, total_unit: float, active: float,
                                                         active_unit: float, with_embedding: bool) -> None:
    model = get_moe_model(name)
    assert total <= model.num_params() < total + total_unit
    assert active <= active_params(model, input_embedding=with_embedding) < active + active_unit


def test_qwen3_30b_non_embedding_params_match_model_card() -> None:
    """29.9B without the input embedding and the (untied) output head."""
    model = get_moe_model("qwen3-30b-a3b")
    non_embedding = model.num_params() - model.embedding_params() - model.vocab_size * model.hidden_size
    assert 29.9e9 <= non_embedding < 30.0e9


def test_kimi_k2_has_one_dense_layer_then_60_moe_layers() -> None:
    assert moe_layers(get_moe_model("kimi-k2")) == list(range(1, 61))


def test_deepseek_v3_activates_37b_as_its_paper_rounds() -> None:
    """The paper's headline "37B activated" is README_WEIGHTS.md's 36.6B rounded."""
    assert active_params(get_moe_model("deepseek-v3"), input_embedding=False) / 1e9 == pytest.approx(37, abs=0.5)


def test_qwen3_non_embedding_params_match_model_card() -> None:
    model = get_moe_model("qwen3-235b-a22b")
    assert model.num_params() - model.embedding_params() == pytest.approx(234e9, rel=REL)


def test_gpt_oss_breakdown_matches_model_card_table() -> None:
    """gpt-oss model card, Table 1 (120b): MLP 114.71B, attention 0.96B, embed + unembed 1.16B."""
    model = get_moe_model("gpt-oss-120b")
    embed_unembed = model.embedding_params() + model.vocab_size * model.hidden_size
    non_mlp = model.num_params() - embed_unembed
    assert embed_unembed == pytest.approx(1.16e9, rel=REL)
    assert non_mlp == pytest.approx(114.71e9 + 0.96e9, rel=REL)


def test_deepseek_v3_has_three_dense_layers_then_58_moe_layers() -> None:
    layers = moe_layers(get_moe_model("deepseek-v3"))
    assert layers == list(range(3, 61))


def test_presets_registry_lists_names_on_a_miss() -> None:
    assert set(moe_presets()) == {name for name, *_ in PUBLISHED + TRUNCATED}
    with pytest.raises(ValueError, match="valid: .*deepseek-v3.*mixtral-8x7b"):
        get_moe_model("mixtral-8x22b")
