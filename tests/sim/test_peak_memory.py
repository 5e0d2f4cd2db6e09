"""One peak-memory number (issue 16): the most HBM allocated at any instant, from the memory
timeline; ``peak_memory_gib``, ``memory_timeline.peak_gib``, the terminal and the report print it."""

import json
import re

import pytest

from sim.cli.main import main
from sim.job import resolve_job
from sim.memory import GIB
from sim.simulate import simulate
from sim.summary import summarize

JOBS = [
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 32},
    {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2, "global_batch": 16, "zero": 3},
    {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 4, "global_batch": 16,
     "schedule": "interleaved", "recompute": "full"},
]


@pytest.mark.parametrize("settings", JOBS, ids=["default", "zero3", "interleaved-full-recompute"])
def test_every_peak_is_the_timeline_maximum(settings):
    result = simulate(resolve_job(settings))
    # ground truth: the highest point of the sum of every category's bytes over time, on any rank
    truth = max(float(sum(mt.bytes.values()).max()) for mt in result.memory_timelines.values())
    s = summarize(result)
    assert s["peak_memory_gib"] == s["memory_timeline"]["peak_gib"] == round(truth / GIB, 4)
    assert sum(s["memory_timeline"]["at_peak_gib"].values()) == pytest.approx(s["peak_memory_gib"], abs=1e-3)
    rank = s["simulation"]["peak_memory_rank"]
    assert rank == s["memory_timeline"]["rank"]
    assert result.memory_timelines[rank].peak_bytes == pytest.approx(truth)
    # the static breakdown (each category at its own maximum) never undercuts the peak
    assert sum(s["memory_gib"].values()) >= s["peak_memory_gib"] - 1e-3


def test_terminal_json_and_report_print_the_same_peak(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--json"]) == 0
    peak = json.loads(capsys.readouterr().out)["peak_memory_gib"]
    assert peak == pytest.approx(31.585, abs=1e-3)  # the default job (docs/commands/simulate.md)
    assert main(["simulate", "--report", "r.html"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "peak_memory_gib" in line)
    assert f"{peak:.2f}" in row
    html = (tmp_path / "r.html").read_text()
    assert f"HBM peak on rank 0: {peak:.2f} GiB" in html
    head, body = re.search(r"<thead><tr>(.*?)</tr></thead><tbody><tr>(.*?)</tr>", html).groups()
    names = [re.sub("<[^>]+>", "", c) for c in re.findall(r"<th>(.*?)</th>", head)]
    values = re.findall(r"<td>(.*?)</td>", body)
    assert values[names.index("peak_memory_gib")] == f"{peak:.2f}"
