"""Acceptance (issue 17): a recorded MoE run validates with the same targets and noise-floor rule
as the dense suite (tests/profiler/test_validate_suite.py): three recordings per configuration,
each metric within max(target, the recordings' own spread), else a named strict xfail with its
numbers and cause. `trainsim validate --suite --moe --json` prints the same checks."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
from pathlib import Path

import pytest

from profiler.validate.suite import CALIBRATION, MOE_SUITE, SUITE
from profiler.validate.suite_run import MOE_PROFILE, FloorCheck, floor_checks, validate_suite
from sim.cli.main import main
from tests.profiler.test_validate_suite import METRICS, check_params
from topo.hardware_profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / MOE_PROFILE  # fitted in the machine state of the MoE recordings (suite_run.MOE_PROFILE)


def test_moe_suite_runs_are_moe_with_expert_parallelism_and_held_out() -> None:
    moe, twin = (s.config() for s in MOE_SUITE)
    assert moe.model.moe is not None and moe.ep > 1 and moe.tp > 1 and moe.dp > 1
    # the dense twin: the same model without experts, the same plan without EP
    assert twin.model.moe is None and twin.model.name == moe.model.name.split("-moe")[0]
    assert dataclasses.replace(moe, model=twin.model, ep=1) == twin
    names = {s.directory for s in (*SUITE, *CALIBRATION)}
    assert not names & {s.directory for s in MOE_SUITE}
    assert not any(s.directory in (PROFILE.read_text() if PROFILE.is_file() else "") for s in MOE_SUITE)


def _recorded() -> bool:
    return PROFILE.is_file() and all(
        (ROOT / "traces" / s.directory / d / "manifest.json").is_file()
        for s in MOE_SUITE for d in (".", "repeat-2", "repeat-3"))


@pytest.fixture(scope="module")
def checks() -> list[FloorCheck]:
    """The MoE suite's floor checks on the committed recordings and profile."""
    return floor_checks(validate_suite(ROOT / "traces", load_profile(PROFILE), specs=MOE_SUITE, before=False))


# (configuration, metric) pairs whose error stays beyond max(target, noise floor) on the committed
# recordings and profile (`trainsim validate --suite --moe --json`, floor_checks). Strict: each
# marker must go when its check passes.
_TWIN = ("not explained yet: the dense twin (the MoE run's plan without experts, recorded in the same "
         "sessions) is simulated too slow while the MoE run meets every target with the same profile; the "
         "dense suite's 4- and 8-rank DP runs miss too (tests/profiler/test_validate_suite.py)")
KNOWN_MISSES: dict[tuple[str, str], str] = {
    ("tp2dp2-tiny-dense-twin", "step_time_s"): f"+18.3% against a floor of 10.3%: {_TWIN}",
    ("tp2dp2-tiny-dense-twin", "bubble_fraction"): f"+9.46 pts (floor 1.8): {_TWIN}",
    ("tp2dp2-tiny-dense-twin", "exposed_comm_fraction"): f"-8.24 pts (floor 1.7): {_TWIN}",
}


def test_moe_profile_was_fitted_on_calibration_runs_only() -> None:
    """The MoE suite's profile comes from the calibration configurations (recorded beside the MoE
    runs, under traces/session-2026-11-26/), none of the suites' runs."""
    text = PROFILE.read_text()
    assert all(spec.directory in text for spec in CALIBRATION)
    assert not any(s.directory in text for s in (*MOE_SUITE, *SUITE))
    for spec in CALIBRATION:
        assert (ROOT / "traces" / "session-2026-11-26" / spec.directory / "manifest.json").is_file()


def test_known_misses_name_real_checks() -> None:
    names = {s.name for s in MOE_SUITE}
    assert all(config in names and metric in METRICS for config, metric in KNOWN_MISSES)


@pytest.mark.skipif(not _recorded(), reason="MoE suite runs (three recordings) or profile not recorded")
@pytest.mark.parametrize(("config", "metric"), check_params(MOE_SUITE, KNOWN_MISSES))
def test_moe_run_within_target_or_noise_floor(checks: list[FloorCheck], config: str, metric: str) -> None:
    [check] = [c for c in checks if c.config == config and c.metric == metric]
    assert check.floor is not None, "three recordings per configuration give a noise floor"
    assert check.allowed == pytest.approx(max(check.target, check.floor))
    assert check.ok, check.describe()


@pytest.mark.skipif(not _recorded(), reason="MoE suite runs (three recordings) or profile not recorded")
@pytest.mark.slow  # validates the suite again through the CLI
def test_cli_prints_the_moe_suite_checks() -> None:
    cwd, out = os.getcwd(), io.StringIO()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["validate", "--suite", "--moe", "--json"])
    finally:
        os.chdir(cwd)
    result = json.loads(out.getvalue())
    assert code in (0, 1)
    assert [r["config"] for r in result["runs"]] == [s.name for s in MOE_SUITE]
    assert all(r["recordings"] == 3 for r in result["runs"])
    assert {(c["config"], c["metric"]) for c in result["floor_checks"]} == {
        (s.name, m) for s in MOE_SUITE for m in METRICS}


def test_moe_flag_needs_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--moe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--moe" in err[0]


@pytest.mark.skipif(not _recorded(), reason="MoE suite runs (three recordings) or profile not recorded")
@pytest.mark.slow
def test_token_exchange_waits_are_communication_not_compute() -> None:
    """The trainer's all-to-alls wait in ``_c10d_functional::wait_tensor`` (a collective call to
    the parser), so the compute spans of the AllToAll autograd ranges keep only their own work:
    in ``traces/ep2tp2dp2-moe`` (before) they were 1.3x the gloo transfers' time, in the suite's
    recording 1% of it."""
    from profiler.validate.measured import load_measured

    def share(path: Path) -> float:
        spans = load_measured(path).timeline.spans
        seconds = spans["end_s"] - spans["start_s"]
        names = spans["name"].astype(str)
        compute = seconds[(spans["lane"] == "compute") & names.str.contains("AllToAll")].sum()
        return float(compute / seconds[names == "gloo:all_to_all"].sum())

    assert share(ROOT / "traces" / "ep2tp2dp2-moe") > 0.5
    assert share(ROOT / "traces" / MOE_SUITE[0].directory) < 0.05
