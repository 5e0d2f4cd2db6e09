"""--plotly-js: inline embeds plotly.js (default, offline), cdn references cdn.plot.ly with the
bundle's integrity hash, directory writes plotly.min.js once beside the reports."""

import base64
import hashlib
import os

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from sim.cli.main import build_parser, main
from sim.report.html import PlotlyJs, Report

BUNDLE = get_plotlyjs()


def report() -> Report:
    rep = Report("t")
    rep.note("a note")
    rep.figure(go.Figure(go.Bar(x=[1, 2], y=["a", "b"], orientation="h")))
    rep.figure(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])))
    return rep


def test_inline_embeds_plotly_once(tmp_path):
    html = report().write(tmp_path / "r.html").read_text()
    assert html.count(BUNDLE) == 1  # two figures, one copy of the 4.8 MB library
    assert len(html) > len(BUNDLE) and not (tmp_path / "plotly.min.js").exists()


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
    html = rep.write(tmp_path / "r.html", PlotlyJs.DIRECTORY).read_text()
    assert not (tmp_path / "plotly.min.js").exists() and "plotly" not in html.lower()


def test_same_report_same_bytes(tmp_path):
    assert report().render(PlotlyJs.CDN) == report().render(PlotlyJs.CDN)


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
    assert err.count("\n") == 1 and "'web'" in err and "cdn" in err


def test_schedule_directory_mode_from_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["schedule", "--plotly-js", "directory"]) == 0
    assert (tmp_path / "plotly.min.js").read_text() == BUNDLE
    assert (tmp_path / "schedule.html").stat().st_size < 200_000
