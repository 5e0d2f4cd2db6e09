"""``simulate``'s line when the plan does not fit HBM: the parts, the settings that shrink them, and
an explore command that finds plans that fit (run here)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sim.cli.fit_hint import fit_hint
from sim.cli.main import main

TOO_BIG = ["simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "64", "--no-report"]


def _hint_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("does not fit")]
    assert len(lines) == 1, out
    return lines[0]


def test_the_default_plan_of_a_large_model_says_what_to_change_and_explore_finds_plans_that_fit(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(TOO_BIG) == 0
    line = _hint_line(capsys.readouterr().out)
    assert "peak 220.3 GiB of 76.0 usable" in line and "optimizer 98.6" in line and "activations 72.2" in line
    assert "--zero 1 shards the optimizer states over dp=64" in line and "--recompute selective or full" in line
    command = shlex.split(line.split("search every plan: ", 1)[1])
    assert command[:2] == ["trainsim", "explore"] and "dgx-h100:512" in command
    out_dir = str(tmp_path / "sweep")
    args = [out_dir if a == "sweep/" else a for a in command[1:]]
    assert main([*args, "--no-report", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"][0]
    assert best["mem_gib"] <= 76.0


def test_following_the_hint_fits_and_prints_no_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TOO_BIG, "--zero", "1", "--recompute", "full"]) == 0
    out = capsys.readouterr().out
    assert "does not fit" not in out and "fits                  │         yes" in out


@pytest.mark.parametrize("plan,part,says,not_says", [
    ({"zero": 0, "dp": 8, "recompute": "none"}, "optimizer", "--zero 1", "offload"),
    ({"zero": 1, "dp": 8, "recompute": "none"}, "optimizer", "--zero 3 shards", "--zero 1"),
    ({"zero": 3, "dp": 8, "recompute": "none"}, "optimizer", "--offload optimizer", "--zero"),
    ({"zero": 0, "dp": 1, "recompute": "none"}, "optimizer", "--offload optimizer", "--zero"),
    ({"zero": 0, "dp": 8, "recompute": "selective"}, "activations", "--recompute full", "selective or"),
    ({"zero": 0, "dp": 8, "recompute": "full"}, "activations", "--microbatch-size", "--recompute"),
    ({"zero": 3, "dp": 8, "recompute": "none"}, "params", "more --tp or --pp", "--zero 3"),
])
def test_each_part_names_the_settings_that_shrink_it(plan: dict[str, object], part: str, says: str,
                                                     not_says: str) -> None:
    summary = {"memory_timeline": {"fits_hbm": False, "peak_gib": 100.0, "usable_hbm_gib": 76.0,
                                   "at_peak_gib": {part: 90.0}},
               "config": {"plan": plan, "model": {"name": "custom"}, "cluster": {"name": "my-cluster.toml"}},
               "world_size": 64}
    line = fit_hint(summary)
    assert line is not None and says in line and not_says not in line.split("; or search")[0]
    assert line.endswith("trainsim explore --gpus 64 --out sweep/")  # no --model/--cluster that are not presets


def test_compare_names_the_schedule_nearest_to_fitting_when_none_fits(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "64", "--no-report"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("no schedule fits")]
    assert len(lines) == 1 and lines[0].startswith("no schedule fits; 1f1b, the nearest: does not fit: peak 220.3")
    assert main([*argv, "--zero", "1", "--recompute", "full"]) == 0
    assert "no schedule fits" not in capsys.readouterr().out
