"""Part-to-part GPU speed variation: a job's compute runs at its slowest GPU's pace
(topo.variability.slowest_gpu_factor, wired in sim.pricing.TaskCoster)."""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main
from sim.job import resolve_job
from sim.simulate import simulate
from topo.variability import GPU_SPEED_CV, slowest_gpu_factor

COMPUTE_ONLY = dict(model="gpt3-1.7b", cluster="dgx-a100", nodes=1, tp=1, pp=1, microbatch_size=1,
                    global_batch=16, ideal_network=True)


def _step(**settings: object) -> float:
    return simulate(resolve_job({**COMPUTE_ONLY, **settings})).metrics.step_time_s


def _gpu_step(**settings: object) -> float:
    """The step less the GPU's waits for the host (the gradient norm's ``.item()``,
    schedules.step_end_syncs): host time, which no GPU's pace stretches."""
    result = simulate(resolve_job({**COMPUTE_ONLY, **settings}))
    spans = result.timeline.spans
    host = spans[(spans["rank"] == 0) & (spans["lane"] == "host")]
    assert len(host) == 1  # the norm's read, the one host wait of this step
    return result.metrics.step_time_s - float((host["end_s"] - host["start_s"]).sum())


def test_compute_only_step_scales_by_the_slowest_of_eight() -> None:
    # no communication cost: the step is compute alone (and one host wait), so its GPU time
    # stretches by exactly the pace
    base = _gpu_step(gpu_speed_cv=0.0)
    assert _gpu_step() / base == pytest.approx(slowest_gpu_factor(GPU_SPEED_CV, 8), rel=1e-9)
    assert _gpu_step(gpu_speed_cv=0.03) / base == pytest.approx(slowest_gpu_factor(0.03, 8), rel=1e-9)


def test_one_gpu_has_no_one_to_wait_for() -> None:
    one = dict(COMPUTE_ONLY, global_batch=2)
    assert _step(**{**one, "gpus_per_node": 1}) == pytest.approx(_step(**{**one, "gpus_per_node": 1,
                                                                         "gpu_speed_cv": 0.0}), rel=1e-12)


def test_json_states_the_pace_and_the_flag_turns_it_off(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "gpt3-1.7b", "--tp", "1", "--pp", "1", "--nodes", "1", "--json", "--no-report"]
    assert main(args) == 0
    on = json.loads(capsys.readouterr().out)
    assert on["simulation"]["gpu_speed_cv"] == GPU_SPEED_CV
    assert on["simulation"]["compute_pace"] == pytest.approx(slowest_gpu_factor(GPU_SPEED_CV, 8), rel=1e-8)
    assert any("slowest of 8 GPUs" in line for line in on["simulation"]["approximations"])
    assert main([*args, "--gpu-speed-cv", "0"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["simulation"]["compute_pace"] == 1.0 and off["step_time_s"] < on["step_time_s"]
    assert main([*args, "--gpu-speed-cv", "0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpu_speed_cv=0.9 is invalid" in err[0]
