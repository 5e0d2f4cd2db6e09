"""The trainer's MoE block and its settings (single process; parity runs are in
test_trainer_moe_parity.py).

Ground truths: the block against the definition sum_k p_k expert_k(x) + shared(x) evaluated token
by token; the built model's parameter count against the spec's closed-form count
(:func:`schedules.moe.total_params`); expert-parallel slices against the full model's experts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from profiler.trainer.args import add_train_arguments, config_from_args, config_to_argv  # noqa: E402
from profiler.trainer.config import TrainConfig  # noqa: E402
from profiler.trainer.model import build_model  # noqa: E402
from profiler.trainer.moe import Experts, MoE  # noqa: E402
from schedules.model_presets import get_model  # noqa: E402
from schedules.moe import MoESpec, total_params  # noqa: E402

TINY = get_model("tiny")
MOE = replace(TINY, moe=MoESpec(num_experts=4, top_k=2, expert_ffn_size=48, num_shared_experts=1,
                                first_dense_layers=1))


def naive_moe(block: MoE, x: torch.Tensor) -> torch.Tensor:
    """The block's definition, one token at a time: softmax router, top-k renormalised."""
    out = torch.zeros_like(x)
    ex = block.experts
    for t, token in enumerate(x):
        probs = F.softmax(block.router.weight @ token, dim=-1)
        top = torch.topk(probs, block.top_k)
        for p, e in zip(top.values / top.values.sum(), top.indices.tolist(), strict=True):
            out[t] += p * (F.silu(token @ ex.w1[e]) * (token @ ex.w3[e])) @ ex.w2[e]
        if block.shared is not None:
            sh = block.shared
            out[t] += (F.silu(token @ sh.w1[0]) * (token @ sh.w3[0])) @ sh.w2[0]
    return out


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_block_computes_the_weighted_sum_of_its_top_k_experts(top_k: int) -> None:
    spec = replace(MOE, moe=replace(MOE.moe, top_k=top_k))  # type: ignore[type-var]
    block = build_model(spec, seed=3).layers["1"].mlp
    assert isinstance(block, MoE)
    x = torch.randn(2, 32, spec.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = block(x)
        expected = naive_moe(block, x.reshape(-1, spec.hidden_size)).view_as(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("moe", [
    MoESpec(num_experts=4, top_k=2, expert_ffn_size=48),
    MoESpec(num_experts=8, top_k=1, expert_ffn_size=16, num_shared_experts=2, shared_ffn_size=24,
            first_dense_layers=2),
    MoESpec(num_experts=2, top_k=2, expert_ffn_size=32, moe_layer_step=2),
])
def test_built_model_has_the_specs_parameter_count(moe: MoESpec) -> None:
    spec = replace(TINY, moe=moe)
    model = build_model(spec, seed=0)
    assert sum(p.numel() for p in model.parameters()) == total_params(spec) == spec.num_params()


def test_dense_layers_keep_the_mlp_and_moe_layers_get_experts() -> None:
    model = build_model(MOE, seed=0)
    assert [isinstance(b.mlp, MoE) for b in model.blocks()] == [False, True, True, True]


def test_an_expert_parallel_slice_holds_the_full_models_experts() -> None:
    from profiler.trainer.moe_parallel import _keep_slice

    full, part = (build_model(MOE, seed=5).get_submodule("layers.2.mlp.experts") for _ in range(2))
    assert isinstance(full, Experts) and isinstance(part, Experts)
    _keep_slice(part, rank=1, size=2)
    assert part.first == 2 and part.num_experts == 2
    torch.testing.assert_close(part.w2.detach(), full.w2.detach()[2:4], rtol=0, atol=0)


def parse(*argv: str) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_moe_flags_build_the_spec_and_round_trip_through_the_worker_command_line() -> None:
    config = parse("--dp", "2", "--ep", "2", "--moe-experts", "4", "--moe-top-k", "1",
                   "--moe-shared-experts", "1", "--moe-dense-layers", "1", "--global-batch", "4")
    assert config.ep == 2 and config.model.moe == MoESpec(
        num_experts=4, top_k=1, expert_ffn_size=TINY.ffn, num_shared_experts=1, first_dense_layers=1)
    assert config.model.name == "tiny-moe4-top1"
    assert parse(*config_to_argv(config)) == config
    assert config.to_dict()["model"]["moe"]["num_experts"] == 4  # type: ignore[index]
    assert parse().model.moe is None and parse().ep == 1


@pytest.mark.parametrize(("argv", "start"), [
    (["--moe-top-k", "2"], "moe-top-k=2 is invalid: needs --moe-experts"),
    (["--moe-experts", "4", "--moe-top-k", "5"], "moe-top-k=5 is invalid: expected <= --moe-experts=4"),
    (["--moe-experts", "0"], "moe-experts=0 is invalid"),
    (["--moe-experts", "4", "--moe-shared-experts", "-1"], "moe-shared-experts=-1 is invalid"),
    (["--ep", "2", "--dp", "2"], "ep=2 is invalid: needs an MoE model"),
    (["--moe-experts", "4", "--ep", "2", "--dp", "3"], "ep=2 is invalid: must divide dp=3"),
    (["--moe-experts", "6", "--ep", "4", "--dp", "4"], "ep=4 is invalid: must divide the experts per layer (6)"),
    (["--moe-experts", "4", "--ep", "2", "--dp", "2", "--zero", "1"], "zero=1 is invalid: ZeRO-1"),
    (["--moe-experts", "4", "--ep", "2", "--dp", "2", "--zero", "2", "--offload", "optimizer"],
     "offload='optimizer' is invalid"),
    (["--model", "tiny-gpt", "--moe-experts", "4"], "ffn_kind='gelu' is invalid"),
    (["--moe-experts", "4", "--ep", "0"], "ep=0 is invalid"),
])
def test_bad_moe_settings_give_one_line_errors(argv: list[str], start: str) -> None:
    with pytest.raises(ValueError) as err:
        parse(*argv)
    assert str(err.value).startswith(start) and "\n" not in str(err.value)


def test_unsupported_spec_fields_are_named() -> None:
    spec = replace(MOE, moe=replace(MOE.moe, capacity_factor=1.25))  # type: ignore[type-var]
    with pytest.raises(ValueError, match=r"^moe.capacity_factor=1.25 is invalid"):
        TrainConfig(model=spec)


@pytest.mark.slow
def test_committed_moe_sample_is_a_parity_run_with_labelled_all_to_alls(
        reference_losses: Callable[[TrainConfig], list[float]]) -> None:
    """traces/ep2tp2dp2-moe: its losses are single-process training's, and its 5 all-to-alls per
    MoE layer and rank are parsed as all_to_all on the expert-parallel lane."""
    from profiler.kineto.run import load_run
    from schedules.model import ModelSpec

    run = Path(__file__).parents[2] / "traces" / "ep2tp2dp2-moe"
    manifest = json.loads((run / "manifest.json").read_text())
    fields = {k: manifest["config"][k] for k in ("tp", "dp", "ep", "global_batch", "steps",
                                                 "warmup_steps", "optimizer", "lr", "seed")}
    config = TrainConfig(model=ModelSpec(**manifest["config"]["model"]), device="cpu", dtype="fp32", **fields)
    assert manifest["losses"] == pytest.approx(reference_losses(config), rel=1e-4)
    spans = load_run(run).timeline.spans
    calls = spans[spans["name"].astype(str) == "gloo:all_to_all"]
    assert set(calls["kind"].astype(str)) == {"all_to_all"} and set(calls["lane"].astype(str)) == {"comm.ep"}
    assert calls.groupby("rank").size().tolist() == [5 * config.model.num_layers] * 4
