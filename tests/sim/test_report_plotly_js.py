"""--plotly-js: assets (default) writes trainsim-assets/plotly-<version>.min.js once beside the
reports and loads it relatively (offline, small pages), inline embeds plotly.js (self-contained),
cdn references cdn.plot.ly with the bundle's integrity hash, directory writes plotly.min.js beside."""

import base64
import hashlib
import os

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from sim.cli.main import build_parser, main
from sim.report.html import PlotlyJs, Report

BUNDLE = get_plotlyjs()
ASSET = f"trainsim-assets/plotly-{get_plotlyjs_version()}.min.js"


def report() -> Report:
    rep = Report("t")
    rep.note("a note")
    rep.figure(go.Figure(go.Bar(x=[1, 2], y=["a", "b"], orientation="h")))
    rep.figure(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])))
    return rep


def test_assets_by_default_one_shared_versioned_copy(tmp_path):
    first = report().write(tmp_path / "a.html")
    bundle = tmp_path / ASSET
    assert bundle.read_text() == BUNDLE
    stamp = os.stat(bundle).st_mtime_ns
    report().write(tmp_path / "b.html")
    assert os.stat(bundle).st_mtime_ns == stamp  # reused, not rewritten
    assert sorted(p.name for p in (tmp_path / "trainsim-assets").iterdir()) == [bundle.name]  # no temp files left
    for page in (first, tmp_path / "b.html"):
        html = page.read_text()
        assert f'<script charset="utf-8" src="{ASSET}"></script>' in html and len(html) < 50_000


def test_assets_repairs_a_damaged_copy(tmp_path):
    (tmp_path / "trainsim-assets").mkdir()
    (tmp_path / ASSET).write_text(BUNDLE[:1000])  # truncated by an earlier crash or a full disk
    report().write(tmp_path / "r.html")
    assert (tmp_path / ASSET).read_text() == BUNDLE


def test_assets_name_taken_by_a_file_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "trainsim-assets").write_text("mine")
    with pytest.raises(ValueError, match="trainsim-assets: it exists and is not a directory"):
        report().write(tmp_path / "r.html")
    assert (tmp_path / "trainsim-assets").read_text() == "mine" and not (tmp_path / "r.html").exists()


def test_a_page_in_a_missing_directory_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        report().write(tmp_path / "new" / "r.html")
    assert not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()
    page = report().write(tmp_path / "new" / "r.html")
    assert (page.parent / ASSET).read_text() == BUNDLE


def test_inline_embeds_plotly_once(tmp_path):
    html = report().write(tmp_path / "r.html", PlotlyJs.INLINE).read_text()
    assert html.count(BUNDLE) == 1  # two figures, one copy of the 4.8 MB library
    assert len(html) > len(BUNDLE) and not (tmp_path / "plotly.min.js").exists()
    assert not (tmp_path / "trainsim-assets").exists()


def test_cdn_references_the_bundled_version_with_its_hash(tmp_path):
    html = report().write(tmp_path / "r.html", PlotlyJs.CDN).read_text()
    sri = "sha256-" + base64.b64encode(hashlib.sha256(BUNDLE.encode()).digest()).decode()
    assert f'src="https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"' in html
    assert f'integrity="{sri}"' in html
    assert len(html) < 50_000 and BUNDLE[:2000] not in html


def test_directory_writes_the_bundle_once_beside_the_reports(tmp_path):
    first = report().write(tmp_path / "a.html", PlotlyJs.DIRECTORY)
    bundle = tmp_path / "plotly.min.js"
    assert bundle.read_text() == BUNDLE
    stamp = os.stat(bundle).st_mtime_ns
    report().write(tmp_path / "b.html", PlotlyJs.DIRECTORY)
    assert os.stat(bundle).st_mtime_ns == stamp  # not rewritten
    for page in (first, tmp_path / "b.html"):
        html = page.read_text()
        assert '<script charset="utf-8" src="plotly.min.js"></script>' in html and len(html) < 50_000


def test_directory_rewrites_a_stale_bundle(tmp_path):
    (tmp_path / "plotly.min.js").write_text("old version")
    report().write(tmp_path / "a.html", PlotlyJs.DIRECTORY)
    assert (tmp_path / "plotly.min.js").read_text() == BUNDLE


def test_a_report_without_figures_needs_no_bundle(tmp_path):
    rep = Report("tables only")
    rep.table([{"a": 1}])
    for choice in (PlotlyJs.DIRECTORY, PlotlyJs.ASSETS):
        html = rep.write(tmp_path / "r.html", choice).read_text()
        assert "plotly" not in html.lower()
    assert not (tmp_path / "plotly.min.js").exists() and not (tmp_path / "trainsim-assets").exists()


def test_same_report_same_bytes(tmp_path):
    for choice in PlotlyJs:
        assert report().render(choice) == report().render(choice)


@pytest.mark.parametrize("argv", [
    ["simulate"], ["compare"], ["schedule"], ["explore", "--resume", "d"], ["analyze", "run", "--report", "r.html"],
    ["validate", "run", "--report", "r.html"], ["replay", "run", "--report", "r.html"],
    ["critical-path", "run", "--report", "r.html"],
])
@pytest.mark.parametrize("choice", list(PlotlyJs))
def test_every_report_command_takes_plotly_js(argv, choice):
    args = build_parser().parse_args([*argv, "--plotly-js", choice.value])
    assert args.plotly_js is choice


def test_bad_plotly_js_is_one_line(capsys):
    assert main(["schedule", "--plotly-js", "web"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'web'" in err and "cdn" in err and "assets" in err


def test_schedule_default_is_assets_from_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["schedule"]) == 0
    assert (tmp_path / ASSET).read_text() == BUNDLE
    assert (tmp_path / "schedule.html").stat().st_size < 200_000


def test_schedule_directory_mode_from_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["schedule", "--plotly-js", "directory"]) == 0
    assert (tmp_path / "plotly.min.js").read_text() == BUNDLE
    assert (tmp_path / "schedule.html").stat().st_size < 200_000


def test_a_table_shows_every_key_of_every_row():
    """Rows with different keys: each key is a column, in the order keys first appear; a missing
    value is an empty cell (was: the first row's keys only, dropping the others' values)."""
    rep = Report("t")
    rep.table([{"a": 1, "b": 2}, {"a": 3, "c": 4}])
    html = str(rep.parts[-1])
    assert html.index("<th>a</th>") < html.index("<th>b</th>") < html.index("<th>c</th>")
    assert "<td>4</td>" in html
