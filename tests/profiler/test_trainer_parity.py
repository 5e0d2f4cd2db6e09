"""Parity: every supported TP/PP/DP/ZeRO layout trains like one process on the same batch.

Ground truth is a plain single-process loop (``reference_losses`` in conftest.py): the whole global batch through the
unsplit model (same seeded weights), mean cross-entropy, backward, optimizer step. Each parallel
run (gloo on CPU, ranks spawned per world size, one launch running several configurations)
must give the same global loss at every step within 1e-4 relative. Most runs use plain SGD,
whose update is proportional to the gradient, so a mis-scaled gradient (micro-batch or DP
averaging) shows; AdamW would normalise it away.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from profiler.trainer.config import TrainConfig  # noqa: E402
from profiler.trainer.train import train  # noqa: E402
from schedules.model import ModelSpec  # noqa: E402
from schedules.model_presets import get_model  # noqa: E402

Reference = Callable[[TrainConfig], list[float]]
RTOL = 1e-4
LAUNCH_TIMEOUT_S = 600.0
TINY, TINY_GPT = get_model("tiny"), get_model("tiny-gpt")
TIED = ModelSpec(name="tied", num_layers=2, hidden_size=64, num_heads=4, vocab_size=256,
                 seq_len=32, tied_embeddings=True, dropout=False)


def sgd(model: ModelSpec = TINY, /, **fields: object) -> TrainConfig:
    """A CPU fp32 run of 3 steps with SGD (lr 0.5)."""
    base: dict[str, object] = {"model": model, "steps": 3, "warmup_steps": 0, "device": "cpu",
                               "dtype": "fp32", "optimizer": "sgd", "lr": 0.5}
    return TrainConfig(**(base | fields))  # type: ignore[arg-type]


def adamw(model: ModelSpec = TINY, /, **fields: object) -> TrainConfig:
    """The same with AdamW (lr 3e-3)."""
    return replace(sgd(model, **fields), optimizer="adamw", lr=3e-3)


PP = {"pp": 2, "global_batch": 4}
CONFIGS: dict[int, dict[str, TrainConfig]] = {
    2: {
        "tp2": sgd(tp=2, global_batch=2),
        "tp2-gpt-layernorm-learned-pos": sgd(TINY_GPT, tp=2, global_batch=2),
        "tp2-tied-recompute": sgd(TIED, tp=2, global_batch=2, recompute="full"),
        "pp2-gpipe": sgd(schedule="gpipe", **PP),
        "pp2-1f1b": sgd(schedule="1f1b", **PP),
        "pp2-interleaved-vpp2": sgd(schedule="interleaved", vpp=2, **PP),
        "pp2-zb-h1": sgd(schedule="zb-h1", **PP),
        "pp2-interleaved-zb-vpp2": sgd(schedule="interleaved-zb", vpp=2, **PP),
        "pp2-zbv": sgd(schedule="zbv", vpp=2, **PP),
        "pp2-dualpipev": sgd(schedule="dualpipev", vpp=2, **PP),
        "dp2-replicate": sgd(dp=2, global_batch=4),
        "dp2-zero1": sgd(dp=2, zero=1, global_batch=4),
        "dp2-zero1-adamw": adamw(dp=2, zero=1, global_batch=4),
        "dp2-zero2": sgd(dp=2, zero=2, global_batch=4),
        "dp2-zero3": sgd(dp=2, zero=3, global_batch=4, microbatch_size=2),
    },
    4: {
        "dp4-zero3": sgd(dp=4, zero=3, global_batch=8),
        "dp2pp2-1f1b-zero3": sgd(dp=2, pp=2, zero=3, global_batch=8),
        "dp2pp2-interleaved-zb-zero2": sgd(dp=2, pp=2, vpp=2, schedule="interleaved-zb",
                                           zero=2, global_batch=8),
        "tp2dp2-zero2-recompute": sgd(tp=2, dp=2, zero=2, global_batch=4, recompute="full"),
    },
    8: {
        "tp2pp2dp2-1f1b-replicate": sgd(tp=2, pp=2, dp=2, global_batch=8),
        "tp2pp2dp2-interleaved-zero1-adamw": adamw(tp=2, pp=2, dp=2, vpp=2,
                                                   schedule="interleaved", zero=1, global_batch=8),
        "tp2pp2dp2-gpipe-zero3": sgd(tp=2, pp=2, dp=2, schedule="gpipe", zero=3, global_batch=8),
    },
}


def exit_without_teardown() -> None:
    """End a spawned rank that finished its work and destroyed its process groups, skipping the
    interpreter's finalization: there gloo's worker threads can still hold tensors of
    asynchronous work and abort the process (SIGABRT, "terminate called without an active
    exception"; pytorch/pytorch#179291), failing a run whose results are already written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker(rank: int, world: int, port: int, configs: list[TrainConfig], out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        losses = [train(config).losses for config in configs]
        if rank == 0:
            Path(out).write_text(json.dumps(losses))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_spawned(world: int, configs: dict[str, TrainConfig], out: Path,
                worker: Callable[..., None] | None = None) -> dict[str, Any]:
    """Run ``configs`` one after another in one launch of ``world`` ranks; per config what
    ``worker`` (default: rank 0's losses) wrote to ``out``."""
    context = mp.start_processes(worker or _worker, args=(world, free_port(), list(configs.values()), str(out)),
                                 nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{world}-rank launch timed out after {LAUNCH_TIMEOUT_S} s")
    return dict(zip(configs, json.loads(out.read_text()), strict=True))


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, list[float]]]:
    """Losses of every configuration of a world size, launched once (on first use)."""
    results: dict[int, dict[str, list[float]]] = {}

    def get(world: int) -> dict[str, list[float]]:
        if world not in results:
            out = tmp_path_factory.mktemp(f"parity{world}") / "losses.json"
            results[world] = run_spawned(world, CONFIGS[world], out)
        return results[world]

    return get


CASES = [pytest.param(world, name, id=name, marks=[pytest.mark.slow])  # torchrun launches (2, 4 and 8 ranks): slow
         for world, configs in CONFIGS.items() for name in configs]


@pytest.mark.parametrize(("world", "name"), CASES)
def test_parallel_run_matches_single_process(launch: Callable[[int], dict[str, list[float]]],
                                             reference_losses: Reference, world: int,
                                             name: str) -> None:
    config = CONFIGS[world][name]
    assert config.world_size == world
    expected = reference_losses(config)
    got = launch(world)[name]
    assert len(got) == config.total_steps == 3
    assert got == pytest.approx(expected, rel=RTOL)


@pytest.mark.slow  # trains the reference model (~9 s CPU)
def test_tolerance_detects_a_gradient_scaled_by_two(reference_losses: Reference) -> None:
    """The check is sensitive: doubling every SGD update (a gradient off by 2x) fails it."""
    config = sgd(global_batch=4)
    right = reference_losses(config)
    doubled = reference_losses(replace(config, lr=2 * config.lr))
    assert abs(doubled[2] - right[2]) > 10 * RTOL * abs(right[2])
