"""Issue 16: a single-run ``validate`` uses ``profiles/this-host.toml`` when it exists and was
calibrated on this host (issue 28; else warns why and uses the preset) and says which; ``analyze`` and ``validate`` report the same measured step,
the median over the kept steps of the longest rank's step, named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis import median_step_time, step_statistic
from profiler.host_identity import host_identity, other_host
from sim.cli.main import main
from sim.metrics import StepMetrics

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "traces" / "dp4-zero3"
PROFILE = ROOT / "profiles" / "this-host.toml"


def test_the_step_is_the_median_over_steps_of_the_longest_rank() -> None:
    table = pd.DataFrame({"rank": [0, 1] * 3, "step": [0, 0, 1, 1, 2, 2],
                          "step_time_s": [1.0, 0.9, 1.1, 1.2, 9.0, 1.0]})
    m = StepMetrics(step_time_s=3.73, bubble_fraction=0.0, exposed_comm_fraction=0.0, comm_overlap_fraction=0.0,
                    rank_rows=tuple(table.to_dict("records")))
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


def _profile_dir(root: Path, identity: dict[str, str]) -> Path:
    """``root/profiles/this-host.toml``: the committed profile with ``identity`` in its [profile] table."""
    (root / "profiles").mkdir(parents=True)
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in identity.items())
    text = PROFILE.read_text().replace("[profile]\n", "[profile]\n" + lines, 1)
    (root / "profiles" / "this-host.toml").write_text(text)
    return root


@pytest.mark.skipif(not PROFILE.is_file() or not (RUN / "rank0.json.gz").is_file(), reason="profile or run missing")
@pytest.mark.slow  # replays a run of 8 ranks
def test_one_run_uses_this_hosts_profile_only_when_calibrated_here(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    """Issue 28: a new user's first recording was compared with the committed profile of another machine
    (+65%, exit 1, no hint why). The default profile now applies to one run only on the host it records."""
    here = _profile_dir(tmp_path / "here", host_identity())
    code, out, err = _run(capsys, here, "validate", str(RUN), "--json")
    result = json.loads(out)
    assert (result["profile"], result["calibration"]) == ("profiles/this-host.toml", "profile")
    assert "warning" not in err
    explicit = json.loads(_run(capsys, ROOT, "validate", str(RUN), "--json", "--profile", str(PROFILE))[1])
    assert explicit["metrics"] == result["metrics"]  # the default is that profile

    for root, why in ((ROOT, "it does not record the host it was calibrated on"),
                      (_profile_dir(tmp_path / "other", {**host_identity(), "host_id": "0123456789abcdef"}),
                       "it was calibrated on host_id '0123456789abcdef', this host has"),
                      (tmp_path, "no profiles/this-host.toml here")):
        code, out, err = _run(capsys, root, "validate", str(RUN), "--json")
        preset = json.loads(out)
        assert (preset["profile"], preset["calibration"]) == (None, "preset")
        assert len(err.strip().splitlines()) == 1 and why in err and "warning: " in err, err
        assert preset["metrics"] != result["metrics"]
    assert json.loads(_run(capsys, ROOT, "validate", str(RUN), "--json", "--no-profile")[1])["metrics"] == \
        preset["metrics"]


def test_other_host() -> None:
    here = {"host_id": "a1", "hostname": "vm", "cpu_model": "AMD EPYC"}
    assert other_host(here, here) is None
    assert other_host({"hostname": "vm", "cpu_model": "AMD EPYC"}, here) is None  # what it records matches
    assert "host_id 'b2', this host has 'a1'" in (other_host({**here, "host_id": "b2"}, here) or "")
    assert "does not record" in (other_host({"name": "this-host"}, here) or "")
    assert "does not record" in (other_host({"host_id": "a1"}, {"hostname": "vm"}) or "")  # nothing to compare
    assert set(host_identity()) <= {"host_id", "hostname", "cpu_model"} and host_identity().get("hostname")


def test_analyze_and_replay_take_the_one_measured_step(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 28: replay printed the mean over steps (0.05759 s), analyze the median (0.05949 s). Steps of
    1.0, 1.2 and 3.0 ms (the fourth, last, dropped): both now print the median of the longest rank, 1.2 ms."""
    from test_kineto_builders import TraceBuilder

    for rank in (0, 1):
        b = TraceBuilder(rank, backend="gloo")
        start = 0.0
        for n, dur in enumerate((1000.0, 1200.0, 3000.0, 1000.0), start=1):
            b.step(n, start, dur)
            b.op("aten::mm", start + 10, dur - 20 - 100 * rank)
            start += dur
        b.write(tmp_path / f"rank{rank}.json")
    analyzed = json.loads(_run(capsys, ROOT, "analyze", str(tmp_path), "--json")[1])
    replayed = json.loads(_run(capsys, ROOT, "replay", str(tmp_path), "--json")[1])
    assert analyzed["step_time_s"] == replayed["metrics"]["measured"]["step_time_s"] == pytest.approx(1.2e-3)
    assert analyzed["step_time_statistic"] == replayed["step_time_statistic"] == "median of 3 steps"
