"""Model presets against published parameter counts and the Megatron-LM FLOPs formula."""

import pytest

from schedules.flops import logits_flops
from schedules.layer_kinds import layer_flops, model_flops_per_step
from schedules.model import ModelSpec
from schedules.model_presets import get_model, model_presets


@pytest.mark.parametrize(("name", "published", "tol"), [
    ("gpt3-175b", 175.0e9, 0.01),      # Brown et al. 2020
    ("llama3-8b", 8.03e9, 0.005),      # Llama 3 model card
    ("llama3-70b", 70.6e9, 0.005),
    ("llama3-405b", 405.8e9, 0.005),
    ("nanogpt-124m", 124.4e6, 0.005),  # nanoGPT: "124M" (incl. position embeddings)
    ("gpt3-1t", 1008.0e9, 0.01),       # Narayanan et al. 2021, Table 1
    ("gpt3-530b", 529.6e9, 0.01),
])
def test_parameter_counts_match_published(name, published, tol):
    assert get_model(name).num_params() == pytest.approx(published, rel=tol)


def test_gpt_layer_params_match_megatron_closed_form():
    # Megatron-LM: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) for GPT with learned positions.
    m = get_model("gpt3-175b")
    n_layers, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_len
    closed = 12 * n_layers * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * n_layers * h))
    # Ours adds the final LayerNorm (2h) and the untied output matrix (V h).
    assert m.num_params() == pytest.approx(closed + 2 * h + v * h, rel=1e-12)


def test_flops_match_narayanan_formula():
    # F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per iteration (Narayanan et al. 2021, eq. 3).
    m = get_model("gpt3-175b")
    batch = 1536
    n_layers, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_len
    closed = 72 * batch * s * n_layers * h**2 * (1 + s / (6 * h) + v / (12 * n_layers * h))
    assert model_flops_per_step(m, batch) == pytest.approx(closed, rel=1e-12)


def test_backward_is_twice_forward_and_splits_for_zero_bubble():
    f = layer_flops(get_model("llama3-8b"), 2)
    assert f.backward == pytest.approx(2 * f.forward)
    assert f.backward_weight == pytest.approx(f.gemm)
    assert logits_flops(get_model("llama3-8b"), 1) == 2 * 8192 * 4096 * 128256


def test_presets_are_valid_and_unknown_lists_names():
    assert "tiny" in model_presets() and "llama3-405b" in model_presets()
    with pytest.raises(ValueError, match="valid: .*gpt3-175b.*llama3-70b"):
        get_model("gpt-5")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_heads": 5}, "hidden_size"),
    ({"num_kv_heads": 3}, "num_kv_heads"),
    ({"ffn_kind": "relu"}, "ffn_kind"),
    ({"num_layers": 0}, "num_layers"),
])
def test_bad_model_dimensions_name_the_field(kwargs, field):
    base = dict(num_layers=2, hidden_size=64, num_heads=4, vocab_size=100, seq_len=16)
    with pytest.raises(ValueError, match=field):
        ModelSpec(**{**base, **kwargs})
