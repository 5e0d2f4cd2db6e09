"""Further recordings of a configuration (``repeat-<k>/``): their steps join every measured figure."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from profiler.validate.compare import validate_run
from profiler.validate.measured import load_measured, repeat_directories, step_figures
from profiler.validate.store import write_timeline
from profiler.validate.suite import SUITE
from profiler.validate.suite_run import suite_rows, validate_suite
from sim.metrics import rank_step_table
from sim.timeline import Timeline

ROOT = Path(__file__).resolve().parents[2]
RUN = "suite-pp2-gpipe-small"


def _slowed(tl: Timeline, factor: float) -> Timeline:
    """The recording with every time (spans and step windows) ``factor`` times larger."""
    df = tl.spans.copy()
    df["start_s"] *= factor
    df["end_s"] *= factor
    scaled = tuple((rank, step, start * factor, end * factor) for rank, step, start, end in tl.meta.step_windows or ())
    return Timeline(df, dataclasses.replace(tl.meta, step_windows=scaled))


def _copy_with_repeat(tmp_path: Path, factor: float) -> Path:
    run = tmp_path / RUN
    shutil.copytree(ROOT / "traces" / RUN, run, ignore=shutil.ignore_patterns("repeat-*"))
    main = load_measured(run).timeline
    repeat = run / "repeat-2"
    repeat.mkdir()
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["step_times_s"] = [t * factor for t in manifest["step_times_s"]]
    (repeat / "manifest.json").write_text(json.dumps(manifest))
    write_timeline(_slowed(main, factor), repeat)
    return run


def _step_times(tl: Timeline) -> list[float]:
    return rank_step_table(tl).groupby("step")["step_time_s"].max().tolist()


@pytest.mark.slow
def test_repeats_pool_their_steps_into_the_figures(tmp_path: Path) -> None:
    run = _copy_with_repeat(tmp_path, 3.0)
    measured = load_measured(run)
    assert [r.path.name for r in measured.repeats] == ["repeat-2"] and repeat_directories(run)[0].name == "repeat-2"
    main, slow = measured.timeline, measured.repeats[0].timeline
    pooled = sorted(_step_times(main) + _step_times(slow))
    expected = (pooled[len(pooled) // 2 - 1] + pooled[len(pooled) // 2]) / 2  # 8 steps: mean of the middle two
    assert step_figures(main, slow).step_time_s == pytest.approx(expected)
    assert step_figures(main, main).step_time_s == pytest.approx(step_figures(main).step_time_s)
    alone = validate_run(ROOT / "traces" / RUN).row("step_time_s").measured
    assert validate_run(run).row("step_time_s").measured == pytest.approx(expected) != pytest.approx(alone)


def test_a_repeat_of_another_configuration_is_refused(tmp_path: Path) -> None:
    run = _copy_with_repeat(tmp_path, 1.0)
    manifest = json.loads((run / "repeat-2" / "manifest.json").read_text())
    manifest["config"]["seed"] += 1  # another configuration, consistent in itself (run_manifest checks that)
    (run / "repeat-2" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="repeat-2: a repeat must record the same configuration"):
        load_measured(run)


def test_suite_rows_count_the_recordings(tmp_path: Path) -> None:
    _copy_with_repeat(tmp_path, 2.0)
    spec = next(s for s in SUITE if s.directory == RUN)
    row = suite_rows(validate_suite(tmp_path, None, specs=(spec,), before=False))[0]
    assert row["recordings"] == 2 and row["recording_spread"] == pytest.approx(1 / 1.5, rel=1e-3)
