"""FSDP2 CPU offload of optimizer states (``offload="optimizer"``): validation and parity.

Parity ground truth is the plain single-process run of the parity tests (``reference_losses``):
with the sharded parameters, gradients and optimizer states on the host (FSDP2
``CPUOffloadPolicy``) the loss curve must still equal it within 1e-4 relative, for DP-only
ZeRO-3/ZeRO-2 (SGD, and AdamW whose states then live on the host) and for two 3D layouts
(TP x DP and PP x DP). The runs are launched like the parity tests (gloo, spawned ranks).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from test_trainer_parity import RTOL, Reference, adamw, exit_without_teardown, run_spawned, sgd  # noqa: E402

from profiler.trainer.args import add_train_arguments, config_from_args, config_to_argv  # noqa: E402
from profiler.trainer.config import TrainConfig  # noqa: E402
from profiler.trainer.train import train  # noqa: E402

OFFLOAD = {"offload": "optimizer"}
CONFIGS: dict[int, dict[str, TrainConfig]] = {
    2: {
        "dp2-zero3-offload": sgd(dp=2, zero=3, global_batch=4, microbatch_size=2, **OFFLOAD),
        "dp2-zero2-offload-adamw": adamw(dp=2, zero=2, global_batch=4, **OFFLOAD),
    },
    4: {
        "tp2dp2-zero3-offload": sgd(tp=2, dp=2, zero=3, global_batch=4, **OFFLOAD),
        "dp2pp2-1f1b-zero2-offload": sgd(dp=2, pp=2, zero=2, global_batch=8, **OFFLOAD),
    },
}
# Launched with the 2-rank offload runs: the same layout without offload reports no offload.
CONTROLS = {2: {"dp2-zero3-no-offload": sgd(dp=2, zero=3, global_batch=4, microbatch_size=2)}}


@pytest.mark.parametrize(("fields", "words"), [
    ({"dp": 1, "zero": 3}, ["offload='optimizer'", "dp=1"]),
    ({"dp": 2, "zero": 1, "global_batch": 2}, ["offload='optimizer'", "zero=1"]),
    ({"dp": 2, "zero": 0, "global_batch": 2}, ["offload='optimizer'", "zero=0"]),
])
def test_offload_needs_fsdp2(fields: dict[str, int], words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        sgd(**fields, **OFFLOAD)  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words)


def test_unknown_offload_lists_the_valid_values() -> None:
    with pytest.raises(ValueError, match=r"offload='params' is invalid: expected one of none, optimizer"):
        sgd(dp=2, zero=3, global_batch=2, offload="params")


def test_offload_flag_round_trips_through_the_worker_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    config = config_from_args(parser.parse_args(["--dp", "2", "--zero", "3", "--offload", "optimizer"]))
    assert config.offload == "optimizer"
    assert config_from_args(parser.parse_args(config_to_argv(config))) == config
    assert config.to_dict()["offload"] == "optimizer"
    assert config_from_args(parser.parse_args([])).offload == "none"


def test_offload_policy_pins_host_memory_only_on_cuda() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    from profiler.trainer.data_parallel import offload_policy

    cpu, cuda = offload_policy("optimizer", "cpu"), offload_policy("optimizer", "cuda")
    assert isinstance(cpu, CPUOffloadPolicy) and not cpu.pin_memory
    assert isinstance(cuda, CPUOffloadPolicy) and cuda.pin_memory
    none = offload_policy("none", "cuda")
    assert type(none) is OffloadPolicy


def _worker(rank: int, world: int, port: int, configs: list[TrainConfig], out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        runs = []
        for config in configs:
            result = train(config)
            ranks = (result.manifest or {}).get("ranks", [])
            runs.append({"losses": result.losses,
                         "offload": [info["fsdp_cpu_offload"] for info in ranks]})
        if rank == 0:
            Path(out).write_text(json.dumps(runs))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """Results of every offload configuration of a world size, launched once (on first use)."""
    results: dict[int, dict[str, Any]] = {}

    def get(world: int) -> dict[str, Any]:
        if world not in results:
            out: Path = tmp_path_factory.mktemp(f"offload{world}") / "losses.json"
            results[world] = run_spawned(world, CONFIGS[world] | CONTROLS.get(world, {}), out, _worker)
        return results[world]

    return get


CASES = [pytest.param(world, name, id=name) for world, configs in CONFIGS.items() for name in configs]



@pytest.mark.parametrize(("world", "name"), CASES)
@pytest.mark.slow
def test_offloaded_run_matches_single_process(launch: Callable[[int], dict[str, Any]],
                                              reference_losses: Reference, world: int,
                                              name: str) -> None:
    config = CONFIGS[world][name]
    assert config.world_size == world and config.offload == "optimizer"
    expected = reference_losses(config)
    run = launch(world)[name]
    assert run["offload"] == [True] * world  # every rank's FSDP2 units really offload
    got = run["losses"]
    assert len(got) == config.total_steps == 3
    assert got == pytest.approx(expected, rel=RTOL)


@pytest.mark.slow
def test_manifest_reports_no_offload_without_it(launch: Callable[[int], dict[str, Any]],
                                                reference_losses: Reference) -> None:
    name, config = next(iter(CONTROLS[2].items()))
    run = launch(2)[name]
    assert run["offload"] == [False, False]
    assert run["losses"] == pytest.approx(reference_losses(config), rel=RTOL)
