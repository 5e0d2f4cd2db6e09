"""Issue 16: a single-run ``validate`` uses ``profiles/this-host.toml`` when it exists (else warns
and uses the preset) and says which; ``analyze`` and ``validate`` report the same measured step,
the median over the kept steps of the longest rank's step, named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis import median_step_time, step_statistic
from sim.cli.main import main
from sim.metrics import StepMetrics

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "traces" / "dp4-zero3"
PROFILE = ROOT / "profiles" / "this-host.toml"


def test_the_step_is_the_median_over_steps_of_the_longest_rank() -> None:
    table = pd.DataFrame({"rank": [0, 1] * 3, "step": [0, 0, 1, 1, 2, 2],
                          "step_time_s": [1.0, 0.9, 1.1, 1.2, 9.0, 1.0]})
    m = StepMetrics(step_time_s=3.73, bubble_fraction=0.0, exposed_comm_fraction=0.0, comm_overlap_fraction=0.0,
                    per_rank=table)
    assert median_step_time(m) == (1.2, 3)  # longest ranks 1.0, 1.2, 9.0: median 1.2 (the mean would be 3.73)
    assert step_statistic(3) == "median of 3 steps" and step_statistic(1) == "median of 1 step"


def _run(capsys: pytest.CaptureFixture[str], cwd: Path, *argv: str) -> tuple[int, str, str]:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(list(argv))
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.skipif(not (RUN / "rank0.json.gz").is_file(), reason="committed run missing")
@pytest.mark.slow
def test_analyze_and_validate_report_the_same_measured_step(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, ROOT, "analyze", str(RUN), "--json")
    analyzed = json.loads(out)
    _, out, _ = _run(capsys, ROOT, "validate", str(RUN), "--json")
    validated = json.loads(out)
    [step] = [m for m in validated["metrics"] if m["metric"] == "step_time_s"]
    assert step["measured"] == analyzed["step_time_s"]
    assert validated["measured_step_statistic"] == analyzed["step_time_statistic"] == "median of 1 step"
    _, out, _ = _run(capsys, ROOT, "validate", str(RUN))
    assert "step_time_s (median of 1 step)" in out


@pytest.mark.skipif(not PROFILE.is_file() or not (RUN / "rank0.json.gz").is_file(), reason="profile or run missing")
@pytest.mark.slow  # replays a run of 8 ranks
def test_one_run_uses_this_hosts_profile_when_it_exists(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, ROOT, "validate", str(RUN), "--json")
    result = json.loads(out)
    assert (result["profile"], result["calibration"]) == ("profiles/this-host.toml", "profile")
    assert "warning" not in err
    explicit = json.loads(_run(capsys, ROOT, "validate", str(RUN), "--json", "--profile", str(PROFILE))[1])
    assert explicit["metrics"] == result["metrics"]  # the default is that profile

    code, out, err = _run(capsys, tmp_path, "validate", str(RUN), "--json")  # no profiles/ here
    preset = json.loads(out)
    assert (preset["profile"], preset["calibration"]) == (None, "preset")
    assert len(err.strip().splitlines()) == 1 and "warning: no profiles/this-host.toml" in err
    assert preset["metrics"] != result["metrics"]
    assert json.loads(_run(capsys, ROOT, "validate", str(RUN), "--json", "--no-profile")[1])["metrics"] == \
        preset["metrics"]
