"""`trainsim analyze` on the committed trainer runs and the external GPU traces."""

import json
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis import analyze_run
from profiler.kineto import load_run
from sim.cli.main import main

TRACES = Path(__file__).resolve().parents[2] / "traces"
EXTERNAL = Path(__file__).resolve().parents[2].parent / "shared" / "traces-external"


def work_spans(run):
    both = pd.concat([run.timeline.spans, run.raw], axis=1)
    return both[both["source"] == "gloo_work"]


@pytest.mark.slow
def test_gloo_groups_are_inferred_as_the_trainer_issued_them():
    # The trainer's TP2 x PP2 x DP2 run: SP all-gathers / reduce-scatters run on the TP group,
    # pipeline sends/receives on the PP group, ZeRO-1's parameter broadcasts on the DP group.
    run = load_run(TRACES / "tp2pp2dp2-interleaved")
    w = work_spans(run)
    lanes = w.groupby("kind", observed=True)["lane"].agg(lambda s: set(s.astype(str)))
    assert lanes["all_gather"] == {"comm.tp"} and lanes["reduce_scatter"] == {"comm.tp"}
    assert lanes["send"] == {"comm.pp"} and lanes["recv"] == {"comm.pp"}
    assert lanes["broadcast"] == {"comm.dp"}
    pgs = {(r.rank, r.name): tuple(r.ranks) for r in run.process_groups.itertuples()}
    for key, part in w.groupby("group"):
        pg = key.split("#")[0]
        members = pgs[(int(part["rank"].iloc[0]), pg)]
        assert sorted(part["rank"].unique()) == sorted(members), key  # each collective on exactly its group


@pytest.mark.parametrize("name", ["tp2pp2dp2-interleaved", "dp4-zero3", "pp2-zbv"])
@pytest.mark.slow
def test_analyze_matches_the_trainers_own_step_time(name):
    result = analyze_run(TRACES / name)
    s = result.summary
    assert s["trainer_step_time_s"] is not None
    assert s["step_time_s"] == pytest.approx(s["trainer_step_time_s"], rel=0.05)
    assert 0 <= s["bubble_fraction"] <= 1 and 0 <= s["exposed_comm_fraction"] <= 1
    assert len(s["ranks"]) == s["world_size"]
    assert all(0.99 < r["compute_fraction"] + r["non_compute_fraction"] + r["idle_fraction"] < 1.01 for r in s["ranks"])


def test_analyze_cli_json_report_and_trace(tmp_path, capsys):
    code = main(["analyze", str(TRACES / "pp2-zbv"), "--json", "--report", str(tmp_path / "m.html"),
                 "--chrome-trace", str(tmp_path / "t.json")])
    assert code == 0
    obj = json.loads(capsys.readouterr().out)
    assert {"rank", "step_time_s", "span_s", "compute_fraction", "non_compute_fraction", "idle_fraction",
            "comm_s", "comm_overlap_fraction"} <= set(obj["ranks"][0])
    assert (tmp_path / "m.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_analyze_bad_path_is_one_line(tmp_path, capsys):
    code = main(["analyze", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/traces-external not present")
@pytest.mark.parametrize("run", ["dlrm-8rank-v100", "hta-sampled-2rank-of-128"])
def test_analyze_external_gpu_runs(run):
    s = analyze_run(EXTERNAL / run).summary
    assert s["ranks"] and s["step_time_s"] > 0
    assert all(r["comm_s"] > 0 for r in s["ranks"])
