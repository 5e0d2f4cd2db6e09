"""explore's error band: every result row carries the measured step's 80% band, and a design is
called slower than the fastest only when its band lies wholly above the fastest's."""

from __future__ import annotations

import pytest

from sim.explore.rank import TIME, band_text, distinguishable


def _row(days: float, step: float, low: float | None, high: float | None, comparable: bool = True) -> dict:
    return {TIME: days, "step_time_s": step, "step_low_s": low, "step_high_s": high, "band_comparable": comparable}


def test_plans_differ_only_beyond_their_bands() -> None:
    fast = _row(10.0, 1.0, 0.9, 1.2)
    assert not distinguishable(fast, _row(11.0, 1.1, 0.99, 1.32))  # 12 days (fast's top) > 9.9 (other's bottom)
    assert distinguishable(fast, _row(20.0, 2.0, 1.8, 2.4))  # 12 < 18
    assert distinguishable(_row(10.0, 1.0, None, None), _row(11.0, 1.1, None, None))  # no band: by the estimate


def test_band_text_marks_bands_without_comparable_runs() -> None:
    assert band_text(_row(1.0, 1.0, 0.91, 1.23)) == "0.91-1.23"
    assert band_text(_row(1.0, 1.0, 0.91, 1.23, comparable=False)) == "~0.91-1.23"
    assert band_text(_row(1.0, 1.0, None, None)) == "—"


@pytest.mark.slow  # a sweep of every plan
def test_every_swept_plan_has_a_band(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from sim.cli.main import main

    out = tmp_path / "sweep"
    assert main(["explore", "--model", "llama3-8b", "--cluster", "dgx-h100:16", "--out", str(out), "--no-report"]) == 0
    rows = json.loads((out / "results.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert rows and all(r["step_low_s"] < r["step_high_s"] for r in rows)
    same_class = [r for r in rows if (r["tp"], r["pp"], r["zero"]) == (rows[0]["tp"], rows[0]["pp"], rows[0]["zero"])]
    factor = rows[0]["step_low_s"] / rows[0]["step_time_s"]
    assert all(r["step_low_s"] / r["step_time_s"] == pytest.approx(factor, rel=1e-6) for r in same_class)
