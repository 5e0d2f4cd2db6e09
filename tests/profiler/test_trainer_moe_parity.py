"""Parity of expert-parallel MoE training with single-process training, and its trace.

Ground truth is the plain single-process run of the parity tests (conftest ``reference_run``):
the unsplit MoE model (all experts, same seeded weights) on the whole global batch. Each
expert-parallel run (gloo on CPU, spawned ranks) must give

- the same global loss at every step within the dense parity tolerance (1e-4 relative), and
- the same update (after minus before, Frobenius norm) of every parameter, every expert apart,
  within 1e-3 relative. The losses alone barely see a mis-scaled expert gradient (doubling the
  experts' gradients moves the third loss of this model by ~1e-4); the updates see it as a 2x.

Layouts: EP2 (ZeRO-0, -2, -3), EP2 x TP2, EP2 x PP2 (1F1B and DualPipeV), DP4 x EP2 (experts
replicated or sharded over their 2-rank expert-data-parallel group), and TP2 x PP2 x DP2 x EP2.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from test_trainer_parity import RTOL, adamw, exit_without_teardown, run_spawned, sgd  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from profiler.trainer.config import TrainConfig  # noqa: E402
from profiler.trainer.model import build_model  # noqa: E402
from profiler.trainer.moe import Experts  # noqa: E402
from schedules.model_presets import get_model  # noqa: E402
from schedules.moe import MoESpec  # noqa: E402

UPDATE_RTOL = 1e-3
MOE = replace(get_model("tiny"), name="tiny-moe",
              moe=MoESpec(num_experts=4, top_k=2, expert_ffn_size=48, num_shared_experts=1,
                          first_dense_layers=1))
PP = {"pp": 2, "global_batch": 8}
CONFIGS: dict[int, dict[str, TrainConfig]] = {
    2: {
        "ep2": sgd(MOE, dp=2, ep=2, global_batch=4),
        "ep2-zero3": sgd(MOE, dp=2, ep=2, zero=3, global_batch=4, microbatch_size=2),
        "ep2-zero2-adamw": adamw(MOE, dp=2, ep=2, zero=2, global_batch=4),
    },
    4: {
        "ep2-tp2": sgd(MOE, dp=2, ep=2, tp=2, global_batch=4),
        "ep2-pp2-1f1b": sgd(MOE, dp=2, ep=2, **PP),
        "ep2-pp2-dualpipev": sgd(MOE, dp=2, ep=2, vpp=2, schedule="dualpipev", **PP),
        "dp4-ep2-replicate": sgd(MOE, dp=4, ep=2, global_batch=8),
        "dp4-ep2-zero3": sgd(MOE, dp=4, ep=2, zero=3, global_batch=8),
    },
    8: {
        "tp2pp2dp2-ep2-interleaved-zero2": sgd(MOE, tp=2, dp=2, ep=2, vpp=2, schedule="interleaved",
                                               zero=2, **PP),
    },
}


@torch.no_grad()
def updates(modules: list[torch.nn.Module], config: TrainConfig) -> dict[str, float]:
    """Norm of (trained - initial) of every parameter of ``modules`` (routed experts one by one,
    keyed by their global index). DTensors are gathered (a collective over their mesh)."""
    initial = dict(build_model(config.model, seed=config.seed).named_parameters())
    out: dict[str, float] = {}
    for module in modules:
        for name, param in module.named_parameters():
            now = param.full_tensor() if isinstance(param, DTensor) else param.detach()
            owner = module.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(owner, Experts) and name.split(".")[-2] == "experts":
                for e in range(now.shape[0]):
                    delta = now[e] - initial[name][owner.first + e]
                    out[f"{name}[{owner.first + e}]"] = float(delta.norm())
            else:
                out[name] = float((now - initial[name]).norm())
    return out


def _worker(rank: int, world: int, port: int, configs: list[TrainConfig], out: str) -> None:
    from profiler.trainer.train import global_losses, run_steps, setup

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        results = []
        for config in configs:
            trainer = setup(config)
            step_losses, _ = run_steps(trainer, None)
            every: list[Any] = [None] * world
            dist.all_gather_object(every, updates([s.submod for s in trainer.stages], config))
            merged = {key: value for part in every for key, value in part.items()}
            results.append({"losses": global_losses(step_losses, config), "updates": merged})
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """Losses and updates of every configuration of a world size, launched once (cached)."""
    return functools.cache(lambda world: run_spawned(
        world, CONFIGS[world], tmp_path_factory.mktemp(f"moe{world}") / "results.json", worker=_worker))


CASES = [pytest.param(world, name, id=name, marks=[pytest.mark.slow])  # every MoE launch: slow (2-rank dense parity stays fast)
         for world, configs in CONFIGS.items() for name in configs]


@pytest.mark.parametrize(("world", "name"), CASES)
def test_expert_parallel_run_matches_single_process(
        launch: Callable[[int], dict[str, Any]],
        reference_run: Callable[[TrainConfig], tuple[list[float], Any]], world: int, name: str) -> None:
    config = CONFIGS[world][name]
    assert config.world_size == world
    losses, model = reference_run(config)
    got = launch(world)[name]
    assert got["losses"] == pytest.approx(losses, rel=RTOL)
    expected = updates([model], config)
    assert set(got["updates"]) == set(expected)
    wrong = {key: (got["updates"][key], value) for key, value in expected.items()
             if got["updates"][key] != pytest.approx(value, rel=UPDATE_RTOL)}
    assert not wrong


def _record(rank: int, world: int, port: int, configs: list[TrainConfig], out: str) -> None:
    from profiler.trainer.train import train

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        result = train(configs[0], out_dir=Path(out).parent / "run")
        if rank == 0:
            Path(out).write_text(json.dumps([result.losses]))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()


@pytest.mark.slow
def test_recorded_run_labels_the_token_all_to_alls(tmp_path: Path) -> None:
    """EP2 x TP2 (the EP groups {0, 2} and {1, 3} have the rank sets of the DP groups, which
    gloo traces cannot tell apart by name): every all-to-all is parsed as kind all_to_all on the
    expert-parallel lane. Per MoE layer and micro-batch a rank issues 5: the counts exchange,
    dispatch and combine forward, and the two transposed exchanges in backward; the token
    exchanges of all ranks together move 4 x tokens x top_k x h x 4 bytes per step (fp32)."""
    from profiler.kineto.run import load_run

    config = replace(sgd(MOE, dp=2, ep=2, tp=2, global_batch=4), steps=1, warmup_steps=1)
    (tmp_path / "run").mkdir()  # train() records into a directory its caller made
    run_spawned(4, {"run": config}, tmp_path / "losses.json", worker=_record)
    spans = load_run(tmp_path / "run").timeline.spans
    calls = spans[spans["name"].astype(str) == "gloo:all_to_all"]
    assert set(calls["kind"].astype(str)) == {"all_to_all"}
    assert set(calls["lane"].astype(str)) == {"comm.ep"}
    moe_layers, microbatches = 3, config.num_microbatches
    assert calls.groupby("rank").size().tolist() == [5 * moe_layers * microbatches] * 4
    counts_bytes = 4 * 8  # 4 experts' int64 counts
    tokens = config.global_batch * MOE.seq_len
    token_bytes = calls.loc[calls["bytes"] != counts_bytes, "bytes"].sum()
    assert token_bytes == 4 * moe_layers * tokens * 2 * MOE.hidden_size * 4
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [g["ranks"] for g in manifest["process_groups"]["ep"]] == [[0, 2], [1, 3]]
