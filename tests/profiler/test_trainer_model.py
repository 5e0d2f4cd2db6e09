"""The trainer's transformer, data stream and ZeRO-1 partition (single process)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from profiler.trainer.data import global_batch, rank_batch  # noqa: E402
from profiler.trainer.model import apply_rope, build_model, rope_tables  # noqa: E402
from profiler.trainer.zero1 import partition  # noqa: E402
from schedules.model import ModelSpec  # noqa: E402
from schedules.model_presets import get_model  # noqa: E402

SPECS = [
    get_model("tiny"),  # SwiGLU, RMSNorm, RoPE, GQA, no bias
    get_model("tiny-gpt"),  # GELU, LayerNorm, learned positions, biases
    ModelSpec(name="tied", num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=1,
              vocab_size=64, seq_len=16, tied_embeddings=True, dropout=False),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_parameter_count_matches_the_spec(spec: ModelSpec) -> None:
    model = build_model(spec, seed=0)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: s.name)
def test_a_stage_built_alone_has_the_full_models_weights(spec: ModelSpec) -> None:
    full = dict(build_model(spec, seed=3).named_parameters())
    for layers, first, last in (([0, 1], True, False), ([2], False, False), ([3], False, True)):
        stage = build_model(spec, seed=3, layers=layers, first=first, last=last)
        for name, param in stage.named_parameters():
            assert torch.equal(param, full[name]), name


def test_seed_changes_weights() -> None:
    name = "layers.0.mlp.w1.weight"
    a = dict(build_model(SPECS[0], seed=0).named_parameters())[name]
    b = dict(build_model(SPECS[0], seed=1).named_parameters())[name]
    assert not torch.equal(a, b)


def test_tied_model_shares_the_embedding_matrix() -> None:
    model = build_model(SPECS[2], seed=0)
    assert model.output is not None and model.embed is not None
    assert model.output.weight is model.embed.tok.weight


@pytest.mark.parametrize("spec", [pytest.param(SPECS[0], marks=pytest.mark.slow), *SPECS[1:]], ids=lambda s: s.name)
def test_attention_is_causal(spec: ModelSpec) -> None:
    model = build_model(spec, seed=0).eval()
    tokens, _ = global_batch(seed=0, step=0, batch=2, seq_len=spec.seq_len, vocab_size=spec.vocab_size)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % spec.vocab_size
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.allclose(before[:, :-1], after[:, :-1], atol=1e-6)
    assert not torch.allclose(before[:, -1], after[:, -1])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.slow
def test_stages_chained_equal_the_full_model(spec: ModelSpec) -> None:
    tokens, _ = global_batch(seed=1, step=0, batch=2, seq_len=spec.seq_len, vocab_size=spec.vocab_size)
    layers = spec.num_layers
    with torch.no_grad():
        full = build_model(spec, seed=0)(tokens)
        if spec.tied_embeddings:
            return
        head = build_model(spec, seed=0, layers=range(layers - 1), first=True, last=False)
        tail = build_model(spec, seed=0, layers=[layers - 1], first=False, last=True)
        assert torch.allclose(tail(head(tokens)), full, atol=1e-6)


def test_rope_is_a_rotation_that_encodes_relative_position() -> None:
    cos, sin = rope_tables(8, 4)
    q = torch.randn(1, 8, 1, 4, generator=torch.Generator().manual_seed(0))
    rotated = apply_rope(q, cos, sin)
    assert torch.allclose(rotated.norm(dim=-1), q.norm(dim=-1), atol=1e-6)
    same = q[:, :1].expand(1, 8, 1, 4)  # one vector at every position
    r = apply_rope(same, cos, sin)[0, :, 0]
    dots = r @ r.T  # depends only on the position difference
    assert torch.allclose(dots[0, 2], dots[3, 5], atol=1e-5)


@pytest.mark.slow
def test_gqa_with_repeated_kv_heads_equals_multi_head_attention() -> None:
    gqa_spec = SPECS[0]
    mha_spec = replace(gqa_spec, num_kv_heads=gqa_spec.num_heads)
    gqa, mha = build_model(gqa_spec, seed=0), build_model(mha_spec, seed=0)
    shared = {k: v for k, v in gqa.state_dict().items() if not k.endswith(("wk.weight", "wv.weight"))}
    mha.load_state_dict(shared, strict=False)
    group = gqa_spec.num_heads // gqa_spec.kv_heads
    with torch.no_grad():
        for g_layer, m_layer in zip(gqa.blocks(), mha.blocks(), strict=True):
            for name in ("wk", "wv"):
                w = getattr(g_layer.attention, name).weight.view(gqa_spec.kv_heads, gqa_spec.head_dim, -1)
                repeated = w.repeat_interleave(group, dim=0).reshape(-1, gqa_spec.hidden_size)
                getattr(m_layer.attention, name).weight.copy_(repeated)
        tokens, _ = global_batch(seed=0, step=0, batch=2, seq_len=8, vocab_size=gqa_spec.vocab_size)
        assert torch.allclose(gqa(tokens), mha(tokens), atol=1e-5)


def test_data_is_deterministic_shifted_and_split_over_dp() -> None:
    kwargs = {"seed": 5, "step": 2, "batch": 4, "seq_len": 16, "vocab_size": 64}
    inputs, targets = global_batch(**kwargs)
    again, _ = global_batch(**kwargs)
    assert torch.equal(inputs, again)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert not torch.equal(inputs, global_batch(**(kwargs | {"step": 3}))[0])
    parts = [rank_batch(**kwargs, dp_rank=r, dp=2)[0] for r in range(2)]
    assert torch.equal(torch.cat(parts), inputs)


def test_zero1_partition_balances_sizes() -> None:
    sizes = [100, 60, 50, 40, 10, 5, 77, 3]
    for parts in (2, 3, 4):
        owners = partition(sizes, parts)
        loads = [sum(s for s, o in zip(sizes, owners, strict=True) if o == p) for p in range(parts)]
        assert sum(loads) == sum(sizes)
        # greedy list scheduling bound: no part exceeds the average by more than one item
        assert max(loads) <= sum(sizes) / parts + max(sizes)
        assert all(load > 0 for load in loads)
    assert partition([1], 4) == [0]
