"""End to end: ``trainsim profile`` under torchrun (gloo, CPU) records traces and a manifest;
a failing rank ends the launch quickly with one line naming it; ``--slow-rank`` slows a rank."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from profiler.annotations import OPTIMIZER, action_name, layer_name, parse_action, step_name  # noqa: E402
from profiler.launch import GRACE_S, run_profile  # noqa: E402
from profiler.trainer.config import TrainConfig  # noqa: E402
from schedules.model_presets import get_model  # noqa: E402
from sim.cli.main import main  # noqa: E402

TINY = get_model("tiny")
Reference = Callable[[TrainConfig], list[float]]


def load_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "traces are gzipped"
    return json.loads(gzip.decompress(raw))


def range_names(trace: dict[str, Any]) -> Counter[str]:
    """Complete-event names of trainsim and torch step ranges."""
    return Counter(e["name"] for e in trace["traceEvents"]
                   if e.get("ph") == "X" and e["name"].startswith(("trainsim:", "ProfilerStep#")))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(list(argv)) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.slow
def test_profile_records_every_action_and_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     reference_losses: Reference) -> None:
    out = tmp_path / "run"
    code = main(["profile", "--pp", "2", "--schedule", "interleaved", "--vpp", "2",
                 "--steps", "2", "--warmup-steps", "1", "--device", "cpu", "--optimizer", "sgd",
                 "--lr", "0.5", "--out", str(out), "--json"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((out / "manifest.json").read_text())
    config = TrainConfig(model=TINY, pp=2, vpp=2, schedule="interleaved", global_batch=4, steps=2,
                         warmup_steps=1, device="cpu", optimizer="sgd", lr=0.5)
    assert summary["traces"] == manifest["world_size"] == 2
    assert manifest["losses"] == pytest.approx(reference_losses(config), rel=1e-4)
    assert manifest["profiled_steps"] == [1, 2]
    analyzed = _json(capsys, "analyze", str(out), "--json")  # one measured step in profile, analyze, replay
    assert (summary["step_time_s"], summary["step_time_statistic"]) == (analyzed["step_time_s"], "median of 1 step")
    assert _json(capsys, "replay", str(out), "--json")["metrics"]["measured"]["step_time_s"] == summary["step_time_s"]
    assert summary["trainer_step_time_s"] == analyzed["trainer_step_time_s"] == pytest.approx(manifest["step_times_s"][1])
    assert len(manifest["step_times_s"]) == 3 and min(manifest["step_times_s"]) > 0
    assert manifest["config"]["schedule"] == "interleaved" and manifest["config"]["vpp"] == 2
    assert manifest["config"]["model"]["hidden_size"] == TINY.hidden_size
    for key in ("mesh", "process_groups", "torch_version", "backend", "devices", "hosts", "cpu_count"):
        assert key in manifest
    assert manifest["backend"] == "gloo"
    for rank in (0, 1):
        check_rank_trace(load_trace(out / f"rank{rank}.json.gz"), rank, manifest)


def check_rank_trace(trace: dict[str, Any], rank: int, manifest: dict[str, Any]) -> None:
    """Each profiled step has F and B of every micro-batch of the rank's two stages (Megatron
    interleaved placement: stage s on pipeline rank s % pp), its layers, one optimizer range."""
    assert trace["distributedInfo"]["rank"] == rank
    names = range_names(trace)
    steps = manifest["profiled_steps"]
    stages = [rank, rank + 2]
    for chunk, stage in enumerate(stages):
        for mb in range(4):
            for phase in ("F", "B"):
                assert names[action_name(phase, stage, chunk, mb)] == len(steps)
        assert names[layer_name(stage)] == 4 * len(steps)  # one layer per stage, 4 micro-batches
    actions = [n for n in names if parse_action(n)]
    assert {parse_action(n).stage for n in actions} == set(stages)  # type: ignore[union-attr]
    assert names[OPTIMIZER] == len(steps)
    assert {n for n in names if n.startswith("trainsim:step")} == {step_name(s) for s in steps}
    assert {n for n in names if n.startswith("ProfilerStep#")} == {f"ProfilerStep#{s}" for s in steps}
    sends = [e for e in trace["traceEvents"] if e.get("name") == "gloo:send"]
    assert sends, "pipeline activations and gradients are sent"
    for send in sends:  # one micro-batch of hidden states: (microbatch, seq_len, hidden)
        assert send["args"]["Input Dims"] == [[1, TINY.seq_len, TINY.hidden_size]]
    pg_config = trace["distributedInfo"].get("pg_config", [])
    for groups in manifest["process_groups"].values():
        for group in groups:
            if rank in group["ranks"]:
                assert any(pg["pg_name"] == group["pg_name"] and pg["ranks"] == group["ranks"]
                           for pg in pg_config), group


@pytest.mark.slow
def test_failing_rank_ends_the_launch_with_one_line(tmp_path: Path) -> None:
    config = TrainConfig(model=TINY, dp=2, global_batch=2, steps=1, warmup_steps=1, device="cpu",
                         fail_rank=1)
    result = run_profile(config, tmp_path, timeout_s=240)
    assert not result.ok and not result.timed_out
    assert result.wall_time_s < 120
    message = result.failure()
    assert message is not None and "\n" not in message
    assert message.startswith("rank 1 failed: InjectedFailure")
    assert [p.name for p in result.traces] == ["rank0.json.gz"]  # the rank that finished
    assert result.out_dir == tmp_path.parent / f"{tmp_path.name}.failed"  # the partial run, kept aside
    assert load_trace(result.out_dir / "rank0.json.gz")["distributedInfo"]["rank"] == 0
    assert result.manifest is None
    assert list(tmp_path.iterdir()) == []  # --out is left as it was


@pytest.mark.slow
def test_cli_reports_a_failed_run_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["profile", "--dp", "2", "--steps", "1", "--warmup-steps", "0", "--fail-rank", "0",
                 "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.splitlines()[-1].startswith("trainsim profile: error: rank 0 failed: InjectedFailure")


@pytest.mark.slow  # a torchrun launch
def test_timeout_stops_all_ranks(tmp_path: Path) -> None:
    config = TrainConfig(model=TINY, dp=2, global_batch=2, steps=50, device="cpu")
    result = run_profile(config, tmp_path, timeout_s=4)
    assert result.timed_out and not result.ok
    assert result.wall_time_s < 4 + GRACE_S + 10
    assert "timed out" in (result.failure() or "")
    assert not _processes_mentioning(str(tmp_path))


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_slow_rank_is_slower_by_its_factor(tmp_path: Path) -> None:
    """Rank 1's actions are held to 4x their own wall time; rank 0's are not. Measured inside each
    action (its duration over the time until its last op ends: the rest is the hold, which has no
    ops), so the other rank's contention for the cores does not enter the factor."""
    config = TrainConfig(model=TINY, dp=2, global_batch=8, steps=2, warmup_steps=1, device="cpu",
                         slow_rank=1, slow_factor=4.0)
    result = run_profile(config, tmp_path, timeout_s=240)
    assert result.ok, result.failure()
    factors = [statistics.median(action_factors(load_trace(p))) for p in result.traces]
    assert factors[0] < 1.3  # no hold on rank 0
    assert 3.5 < factors[1] < 4.6  # the hold: (4 - 1) x the action's own compute time
    medians = [statistics.median(action_durations(load_trace(p))) for p in result.traces]
    assert medians[1] > medians[0]  # and the slowed rank's actions are the longer ones


def action_durations(trace: dict[str, Any]) -> list[float]:
    return [float(e["dur"]) for e in trace["traceEvents"]
            if e.get("ph") == "X" and parse_action(e["name"]) is not None]


def action_factors(trace: dict[str, Any]) -> list[float]:
    """Per action: its duration / (end of the last event inside it on its thread - its start)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    factors = []
    for action in (e for e in events if parse_action(e["name"]) is not None):
        start, end = float(action["ts"]), float(action["ts"]) + float(action["dur"])
        last = max((float(e["ts"]) + float(e["dur"]) for e in events
                    if e is not action and e.get("tid") == action.get("tid")
                    and float(e["ts"]) >= start and float(e["ts"]) + float(e["dur"]) <= end), default=end)
        if last > start:
            factors.append((end - start) / (last - start))
    return factors


def test_bad_flags_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["--tp", "3"], ["--schedule", "looped"], ["--pp", "2", "--dp", "2", "--zero", "3",
                                                             "--schedule", "zbv"]):
        assert main(["profile", *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("trainsim profile: error:")


def test_print_launch_prints_a_torchrun_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--tp", "2", "--pp", "2", "--dp", "2", "--print-launch"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("python -m torch.distributed.run --nnodes=$NNODES")
    assert "-m profiler.trainer" in line and "--tp 2" in line
