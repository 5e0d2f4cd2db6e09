"""The published-runs report: predicted vs measured on log axes with y = x and error bands, a trace
per family, and the signed error per row."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_published_output import fake_results

from profiler.validate.published.report import error_figure, scatter_figure, write_report
from profiler.validate.published.summary import summarize

SPECS = [("a", "fam-x", 10.0, 12.0), ("b", "fam-x", 4.0, 3.0), ("c", "fam-y", 2.0, 2.1)]


def test_scatter_is_log_log_with_a_trace_per_family(tmp_path: Path) -> None:
    fig = scatter_figure(fake_results(tmp_path, SPECS))
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    markers = [t for t in fig.data if t.mode == "markers"]
    assert [t.name for t in markers] == ["fam-x", "fam-y"]
    x = markers[0]
    assert list(x.x) == [10.0, 4.0] and list(x.y) == [12.0, 3.0]
    assert [list(c) for c in x.customdata] == [["a", "+20.0%"], ["b", "-25.0%"]]
    assert "%{customdata[0]}" in x.hovertemplate and "%{customdata[1]}" in x.hovertemplate


def test_scatter_draws_y_equals_x_and_the_bands(tmp_path: Path) -> None:
    fig = scatter_figure(fake_results(tmp_path, SPECS))
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    identity = lines["y = x"]
    assert list(identity.x) == list(identity.y)
    ratios = sorted({round(y / x, 9) for t in fig.data if t.mode == "lines" for x, y in zip(t.x, t.y, strict=True)})
    assert ratios == [0.75, 0.9, 1.0, 1.1, 1.25]
    lo, hi = identity.x
    assert lo < 2.0 and hi > 12.0  # every point inside the drawn range


def test_error_bars_are_signed_percent_per_family(tmp_path: Path) -> None:
    fig = error_figure(fake_results(tmp_path, SPECS))
    assert [t.name for t in fig.data] == ["fam-x", "fam-y"]
    assert list(fig.data[0].x) == ["a", "b"] and list(fig.data[0].y) == [pytest.approx(20.0), pytest.approx(-25.0)]
    assert list(fig.layout.xaxis.categoryarray) == ["a", "b", "c"]


def test_report_file_holds_both_figures(tmp_path: Path) -> None:
    results = fake_results(tmp_path, SPECS)
    path = write_report(results, summarize(results), tmp_path / "published.html", "runs.toml")
    html = path.read_text()
    assert html.count("Plotly.newPlot") == 2 and "fam-y" in html and "step time MAPE" in html


def test_the_memory_section_is_there_only_when_a_row_states_a_measured_peak(tmp_path: Path) -> None:
    results = fake_results(tmp_path, SPECS)  # no row states a measured peak
    assert all(r.memory_err is None for r in results)
    html = write_report(results, summarize(results), tmp_path / "none.html", "runs.toml").read_text()
    assert "Peak memory per GPU" not in html and "Families" in html
