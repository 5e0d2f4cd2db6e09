"""The measurement's own noise floor: each recording against the others (leave-one-out)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from profiler.validate.measured import load_measured, step_figures
from profiler.validate.repeatability import leave_one_out
from profiler.validate.store import write_timeline
from profiler.validate.suite import SUITE
from profiler.validate.suite_run import repeatability_summary, suite_rows, validate_suite
from sim.cli.main import main
from sim.timeline import Timeline

ROOT = Path(__file__).resolve().parents[2]
RUN = "suite-pp2-gpipe-small"


def _scaled(tl: Timeline, factor: float) -> Timeline:
    """The recording with every time (spans and step windows) ``factor`` times larger: its
    step times scale by ``factor``, its bubble and exposed-communication fractions do not."""
    df = tl.spans.copy()
    df["start_s"] *= factor
    df["end_s"] *= factor
    windows = tuple((r, s, a * factor, b * factor) for r, s, a, b in tl.meta.step_windows or ())
    return Timeline(df, dataclasses.replace(tl.meta, step_windows=windows))


def _run_with_copies(tmp_path: Path, factors: list[float]) -> Path:
    """The committed main recording plus copies of it scaled by ``factors`` as repeats."""
    run = tmp_path / RUN
    shutil.copytree(ROOT / "traces" / RUN, run, ignore=shutil.ignore_patterns("repeat-*"))
    main = load_measured(run).timeline
    manifest = json.loads((run / "manifest.json").read_text())
    for k, factor in enumerate(factors, start=2):
        repeat = run / f"repeat-{k}"
        repeat.mkdir()
        scaled = {**manifest, "step_times_s": [t * factor for t in manifest["step_times_s"]]}
        (repeat / "manifest.json").write_text(json.dumps(scaled))
        write_timeline(_scaled(main, factor), repeat)
    return run


def test_one_recording_has_no_noise_floor(tmp_path: Path) -> None:
    assert leave_one_out(load_measured(_run_with_copies(tmp_path, []))) is None


def test_two_recordings_predict_each_other_with_the_closed_form_errors(tmp_path: Path) -> None:
    rep = leave_one_out(load_measured(_run_with_copies(tmp_path, [1.25])))
    assert rep is not None and rep.recordings == 2
    # main vs the 1.25x copy: 1/1.25 - 1 = -20%; the copy vs main: +25%; fractions are scale-free
    assert rep.errors["step_time_s"] == pytest.approx((-0.2, 0.25))
    assert rep.errors["bubble_fraction"] == pytest.approx((0.0, 0.0), abs=1e-6)  # the store rounds times
    assert rep.errors["exposed_comm_fraction"] == pytest.approx((0.0, 0.0), abs=1e-6)  # the store rounds times
    assert rep.median_abs("step_time_s") == pytest.approx(0.225)
    assert rep.within == (False, False)


def test_recordings_within_the_targets_of_each_other(tmp_path: Path) -> None:
    rep = leave_one_out(load_measured(_run_with_copies(tmp_path, [1.05])))
    assert rep is not None and rep.within == (True, True)


@pytest.mark.slow
def test_suite_rows_and_summary_carry_the_noise_floor(tmp_path: Path) -> None:
    _run_with_copies(tmp_path, [1.25])
    spec = next(s for s in SUITE if s.directory == RUN)
    entries = validate_suite(tmp_path, None, specs=(spec,), before=False)
    row = suite_rows(entries)[0]
    assert row["repeat_step_err"] == pytest.approx(0.225) and row["repeat_ok"] == "0/2"
    floor = repeatability_summary(entries)
    assert floor["recordings_compared"] == 2 and floor["recordings_within_targets"] == 0
    assert floor["recording_vs_others_mean_abs_step_err"] == pytest.approx(0.225)
    assert floor["configurations"] == 1
    assert floor["simulator_mean_abs_step_err"] == pytest.approx(abs(entries[0].after.row("step_time_s").error), rel=1e-3)
    # the simulation against each recording alone: sim / main - 1 and sim / (1.25 main) - 1
    sim = step_figures(entries[0].after.simulation.timeline).step_time_s
    main = step_figures(load_measured(tmp_path / RUN).timeline).step_time_s
    expected = (abs(sim / main - 1) + abs(sim / (1.25 * main) - 1)) / 2
    assert floor["simulator_vs_each_recording_mean_abs_step_err"] == pytest.approx(expected, rel=1e-3)
    assert 0 <= floor["simulator_within_targets_of_recordings"] <= 2


@pytest.mark.slow
def test_one_run_reports_its_noise_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_with_copies(tmp_path, [1.25])
    code = main(["validate", str(run), "--json"])
    floor = json.loads(capsys.readouterr().out)["noise_floor"]
    assert code in (0, 1)
    assert floor["step_time_s"] == pytest.approx(0.225, rel=1e-3)
    assert floor["recordings"] == 2 and floor["within_targets"] == 0
    assert main(["validate", str(run)]) in (0, 1)
    assert "noise floor (each of the 2 recordings vs the others): step 22.5%" in capsys.readouterr().out


def test_one_recording_reports_no_noise_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_with_copies(tmp_path, [])
    main(["validate", str(run), "--json"])
    assert json.loads(capsys.readouterr().out)["noise_floor"] is None
