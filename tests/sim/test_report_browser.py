"""Reports render in a real headless Chromium with a visible timeline (bars drawn by Plotly)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from schedules.pipeline import build_schedule
from sim.playground import UnitCosts, run_playground
from sim.report.figures import timeline_figure
from sim.report.html import Report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=8000"]


def rendered_dom(html_path: Path, profile: Path) -> str:
    """The DOM after the page's scripts ran (Plotly draws its SVG at load time)."""
    out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", html_path.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout


def count_bars(dom: str) -> int:
    """Bars Plotly drew: each is a ``<g class="point">`` holding a non-empty path."""
    return len(re.findall(r'<g class="point"><path d="M[^"]+"', dom))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.slow
def test_schedule_report_renders_visible_timeline(tmp_path):
    result = run_playground(build_schedule("1f1b", 4, 8), UnitCosts())
    rep = Report("1f1b")
    rep.figure(timeline_figure(result.timeline, "timeline"))
    page = rep.write(tmp_path / "r.html")
    dom = rendered_dom(page, tmp_path / "profile")
    assert "main-svg" in dom, "plotly did not render"
    # 4 ranks x (8 F + 8 B) = 64 compute bars must be on screen.
    assert count_bars(dom) >= 64


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.slow
def test_default_simulate_report_renders(tmp_path, monkeypatch):
    from sim.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["simulate"]) == 0
    dom = rendered_dom(tmp_path / "report.html", tmp_path / "profile")
    # Two pipeline ranks x 16 micro-batches x (F + B) compute bars, plus communication bars.
    assert count_bars(dom) >= 2 * 16 * 2
    assert "Memory per GPU over the step" in dom


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.slow  # a headless browser: seconds of CPU in its child processes
def test_default_assets_playground_renders_every_block(tmp_path, monkeypatch):
    """trainsim-assets/plotly-<version>.min.js beside the page loads (the default, offline: the
    browser runs without network); 1F1B and interleaved stacked: 4 ranks x 8 micro-batches
    x (F + B) blocks, times 1 and 2 chunks, plus the hatched idle bars."""
    from sim.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["schedule", "--schedule", "1f1b,interleaved"]) == 0
    assert (tmp_path / "trainsim-assets").is_dir()
    dom = rendered_dom(tmp_path / "schedule.html", tmp_path / "profile")
    assert "main-svg" in dom
    assert count_bars(dom) >= 4 * 8 * 2 * (1 + 2)
    assert 'class="xtitle"' in dom and 'class="x2title"' in dom  # a time axis under each panel
