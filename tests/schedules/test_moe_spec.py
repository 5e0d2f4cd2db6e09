"""MoESpec: validation, counts and FLOPs against closed forms, dense models unchanged, and the
all-to-all volume per token against an enumeration of every routing."""

from __future__ import annotations

from dataclasses import asdict, replace
from fractions import Fraction
from itertools import combinations

import pytest

from schedules.attention import AttentionSpec
from schedules.flops import moe_ffn_flops
from schedules.layer_kinds import layer_flops, model_flops_per_step
from schedules.model import ModelSpec
from schedules.model_presets import get_model, model_presets
from schedules.moe import (
    MoESpec,
    active_params,
    all_to_all_bytes_per_token,
    is_moe_layer,
    layer_params,
    total_params,
)
from schedules.moe_presets import get_moe_model

TINY = get_model("tiny")  # SwiGLU, h 64, f 176, 4 layers


def with_moe(model: ModelSpec = TINY, /, **fields: object) -> ModelSpec:
    base: dict[str, object] = {"num_experts": 4, "top_k": 2, "expert_ffn_size": 32}
    return replace(model, moe=MoESpec(**(base | fields)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(model_presets()))
def test_dense_presets_are_unchanged(name: str) -> None:
    """moe=None is the default; counting the dense model through the MoE module's per-part
    functions (attention geometry, MLP) gives ModelSpec's own count and FLOPs."""
    model = get_model(name)
    assert model.moe is None and replace(model, moe=None) == model
    assert total_params(model) == model.num_params()
    assert all(layer_params(model, i) == model.layer_params() for i in range(model.num_layers))
    as_moe_path = replace(model, moe=MoESpec(num_experts=1, top_k=1, expert_ffn_size=1,
                                             first_dense_layers=model.num_layers))
    assert model_flops_per_step(as_moe_path, 8) == pytest.approx(model_flops_per_step(model, 8), rel=1e-12)


def test_one_expert_top_one_is_the_dense_mlp_plus_the_router() -> None:
    dense = replace(TINY, bias=False)
    moe = with_moe(dense, num_experts=1, top_k=1, expert_ffn_size=dense.ffn)
    h = dense.hidden_size
    assert moe.num_params() == dense.num_params() + dense.num_layers * h * 1
    router = 2.0 * dense.seq_len * h * 1  # one sequence through the h -> 1 router
    assert layer_flops(moe, 1, 0).forward == pytest.approx(layer_flops(dense, 1).forward + router, rel=1e-12)


def test_moe_ffn_flops_are_two_per_multiply_add_of_the_active_weights() -> None:
    """2mkn per GEMM: one token's MoE FLOPs are 2 x (router + top_k experts + shared experts)."""
    model = with_moe(num_experts=8, top_k=3, expert_ffn_size=48, num_shared_experts=2, shared_ffn_size=40)
    h = model.hidden_size
    per_token = 2 * (h * 8 + 3 * 3 * h * 48 + 2 * 3 * h * 40)
    assert moe_ffn_flops(model, 1).total == per_token
    assert moe_ffn_flops(model, 5).total == 5 * per_token


def test_active_params_count_top_k_experts_and_shared_ones() -> None:
    model = with_moe(num_experts=8, top_k=2, expert_ffn_size=48, num_shared_experts=1)
    expert = 3 * 64 * 48
    assert model.num_params() - active_params(model) == model.num_layers * (8 - 2) * expert


def test_dense_first_layers_and_layer_step() -> None:
    model = with_moe(replace(TINY, num_layers=8), first_dense_layers=2, moe_layer_step=2)
    assert [i for i in range(8) if is_moe_layer(model, i)] == [3, 5, 7]
    assert not any(is_moe_layer(TINY, i) for i in range(TINY.num_layers))


def test_mla_counts_its_projections() -> None:
    """DeepSeek-V3 MLA per layer: q 7168x1536 + 1536x(128x192), kv 7168x576 + 512x(128x256),
    o (128x128)x7168, plus the two latent RMSNorms (1536 + 512): 187,107,328 parameters."""
    model = get_moe_model("deepseek-v3")
    h = model.hidden_size
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert mla == 187_107_328
    dense_layer = layer_params(model, 0)
    assert dense_layer == mla + 2 * h + 3 * h * 18432


def test_json_round_trip_rebuilds_the_nested_specs() -> None:
    model = get_moe_model("deepseek-v3")
    again = ModelSpec(**asdict(model))
    assert again == model and isinstance(again.moe, MoESpec)
    assert isinstance(again.moe.attention, AttentionSpec)


def test_the_model_spec_answers_every_layer_dense_or_moe() -> None:
    model = with_moe()
    assert [model.layer_params(i) for i in range(model.num_layers)] == \
        [layer_params(model, i) for i in range(model.num_layers)]
    assert model.layer_params(0, active=True) == layer_params(model, 0, active=True)
    dense = get_model("llama3-8b")
    assert dense.num_params() == dense.num_layers * dense.layer_params() + dense.embedding_params() + dense.head_params()
    with pytest.raises(ValueError, match="layer"):
        layer_flops(model, 1)  # an MoE model's blocks differ: FLOPs need the layer


@pytest.mark.parametrize(("fields", "field"), [
    ({"num_experts": 0}, "moe.num_experts"),
    ({"top_k": 5}, "moe.top_k"),
    ({"expert_ffn_size": 1.5}, "moe.expert_ffn_size"),
    ({"num_shared_experts": -1}, "moe.num_shared_experts"),
    ({"first_dense_layers": True}, "moe.first_dense_layers"),
    ({"moe_layer_step": 0}, "moe.moe_layer_step"),
    ({"capacity_factor": 0.0}, "moe.capacity_factor"),
    ({"attention": {"head_dim": 0}}, "attention.head_dim"),
    ({"attention": {"head_dim": 64, "q_lora_rank": 16}}, "attention.kv_lora_rank"),
])
def test_bad_moe_fields_give_one_line_errors_naming_them(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}=.* is invalid: ") as err:
        with_moe(**fields)
    assert "\n" not in str(err.value)


def test_moe_field_must_be_a_spec_or_dict() -> None:
    with pytest.raises(ValueError, match=r"^moe=8 is invalid"):
        replace(TINY, moe=8)  # type: ignore[arg-type]


def _bytes_leaving_by_enumeration(num_experts: int, top_k: int, ep: int, hidden: int, nbytes: int) -> Fraction:
    """Mean bytes a token on rank 0 sends off-rank, over every set of top_k distinct experts."""
    per_rank = num_experts // ep
    choices = list(combinations(range(num_experts), top_k))
    off_rank = sum(sum(1 for e in chosen if e // per_rank != 0) for chosen in choices)
    return Fraction(off_rank * hidden * nbytes, len(choices))


@pytest.mark.parametrize(("num_experts", "top_k", "ep"), [(8, 2, 2), (8, 2, 4), (12, 3, 3), (16, 4, 8), (8, 1, 1)])
def test_all_to_all_bytes_match_enumeration_and_closed_form(num_experts: int, top_k: int, ep: int) -> None:
    moe = MoESpec(num_experts=num_experts, top_k=top_k, expert_ffn_size=8)
    got = all_to_all_bytes_per_token(moe, hidden_size=7, ep=ep, bytes_per_element=2)
    assert got == pytest.approx(float(_bytes_leaving_by_enumeration(num_experts, top_k, ep, 7, 2)), rel=1e-12)
    assert got == pytest.approx(top_k * 7 * 2 * (ep - 1) / ep, rel=1e-12)


def test_all_to_all_needs_ep_dividing_the_experts() -> None:
    with pytest.raises(ValueError, match=r"^ep=3 is invalid"):
        all_to_all_bytes_per_token(MoESpec(num_experts=8, top_k=2, expert_ffn_size=8),
                                   hidden_size=4, ep=3, bytes_per_element=2)
