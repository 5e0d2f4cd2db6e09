"""Acceptance: `trainsim validate --suite` meets every target on the committed runs with the
committed profile (fitted on the calibration runs and microbenchmarks only), and the suite
covers what issue 4 asks for."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from profiler.validate.suite import CALIBRATION, SUITE
from sim.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "profiles" / "this-host.toml"


def test_suite_covers_the_required_configurations() -> None:
    configs = [s.config() for s in SUITE]
    assert len(configs) >= 8
    assert {c.world_size for c in configs} >= {2, 4, 8}
    assert any(c.tp > 1 and c.pp == 1 and c.dp == 1 for c in configs)
    assert {c.schedule for c in configs if c.pp > 1} >= {"gpipe", "1f1b", "interleaved"}
    assert {c.zero for c in configs if c.dp > 1} == {0, 1, 2, 3}
    assert sum(c.tp > 1 and c.pp > 1 and c.dp > 1 for c in configs) >= 2
    assert len({c.model.name for c in configs}) >= 2


def test_calibration_runs_are_held_out() -> None:
    suite = {(s.model, tuple(sorted(s.settings.items()))) for s in SUITE}
    assert not suite & {(s.model, tuple(sorted(s.settings.items()))) for s in CALIBRATION}
    profile_text = PROFILE.read_text() if PROFILE.is_file() else ""
    assert not any(f"suite-{s.name}" in profile_text for s in SUITE)


def _recorded() -> bool:
    return PROFILE.is_file() and all((ROOT / "traces" / s.directory / "manifest.json").is_file() for s in SUITE)


@pytest.fixture(scope="module")
def suite_result() -> tuple[int, dict[str, Any]]:
    """`trainsim validate --suite --json` run once for the tests of this module: exit code, output."""
    cwd, out = os.getcwd(), io.StringIO()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["validate", "--suite", "--json"])
    finally:
        os.chdir(cwd)
    return code, json.loads(out.getvalue())


@pytest.mark.skipif(not _recorded(), reason="suite runs or profile not recorded")
def test_validate_suite_compares_every_configuration(suite_result: tuple[int, dict[str, Any]]) -> None:
    code, out = suite_result
    assert code in (0, 1)  # 1: some configuration misses a target (reported, see the next test)
    assert [r["config"] for r in out["runs"]] == [s.name for s in SUITE]
    for row in out["runs"]:
        assert all(math.isfinite(row[k]) for k in ("step_err", "bubble_err", "exposed_err"))
        assert (row["ok"] == "yes") == (abs(row["step_err"]) <= 0.10 and abs(row["bubble_err"]) <= 0.03
                                        and abs(row["exposed_err"]) <= 0.05)


@pytest.mark.skipif(not _recorded(), reason="suite runs or profile not recorded")
@pytest.mark.xfail(strict=True, reason="issue 4 is open: most configurations miss the targets on this "
                   "machine (README 'Validation'); strict, so the marker must go once they pass")
def test_validate_suite_meets_the_targets(suite_result: tuple[int, dict[str, Any]]) -> None:
    code, out = suite_result
    misses = [r["config"] for r in out["runs"] if r["ok"] != "yes"]
    assert code == 0 and not misses, f"configurations missing the targets: {misses}"
    for row in out["runs"]:
        assert abs(row["step_err"]) <= 0.10 and abs(row["bubble_err"]) <= 0.03
        assert abs(row["exposed_err"]) <= 0.05


@pytest.mark.skipif(not _recorded(), reason="suite runs or profile not recorded")
def test_offloaded_run_meets_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 7: the trainer's FSDP2 CPU-offload run (dp2, ZeRO-3, optimizer offload) validates
    within issue 4's targets (step 10%, bubble 3 points, exposed communication 5 points)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = main(["validate", "traces/suite-dp2-zero3-offload-wide", "--profile", str(PROFILE), "--json"])
    finally:
        os.chdir(cwd)
    out = json.loads(capsys.readouterr().out)
    errors = {m["metric"]: m["error"] for m in out["metrics"]}
    assert code == 0 and out["ok"]
    assert abs(errors["step_time_s"]) <= 0.10 and abs(errors["bubble_fraction"]) <= 0.03
    assert abs(errors["exposed_comm_fraction"]) <= 0.05
