"""``trainsim explore``: outputs, one-line errors, resuming a killed sweep, parallel and Dask runs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.explore.backends import DaskCluster, InProcess, LocalProcesses
from sim.explore.spec import SearchSpace, SweepSpec
from sim.explore.sweep import run_sweep

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--model", "small", "--tokens", "1e9", "--global-batch", "32", "--clusters", "dgx-h100,aws-p4d",
         "--gpus", "8,16", "--schedules", "1f1b,zb-h1", "--zero", "1,2"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_explore_writes_tables_report_and_json(capsys, tmp_path):
    code, out, _ = run(capsys, "explore", *SMALL, "--workers", "1", "--verify", "1", "--out", str(tmp_path / "s"),
                       "--json")
    assert code == 0
    summary = json.loads(out)
    doc = json.loads((tmp_path / "s" / "results.json").read_text())
    assert summary["evaluated"] == len(doc["rows"]) > 0
    csv_lines = (tmp_path / "s" / "results.csv").read_text().splitlines()
    assert len(csv_lines) == len(doc["rows"]) + 1
    ids = [r["id"] for r in doc["rows"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {b["design"] for b in summary["best"]} == {"dgx-h100", "aws-p4d"}
    check = summary["engine_check"][0]
    assert check["engine_step_s"] >= check["fast_step_s"] * (1 - 1e-8)
    html = (tmp_path / "s" / "report.html").read_text()
    assert "Pareto front" in html and "Simulated step of the best plan" in html
    # what explore prices (each design's slowest-GPU pace) is not listed as left out
    assert "slowest GPU&#x27;s pace" in html or "slowest GPU's pace" in html
    assert "stragglers or failures" not in html
    assert (tmp_path / "s" / "pareto.html").is_file()


@pytest.mark.parametrize(("args", "needle"), [
    (["--clusters", "dgx-h100,nope"], "dgx-h100"),
    (["--clusters", ""], "aws-p5"),
    (["--price", "nope=1/gpu-hour"], "dgx-h100"),
    (["--price", "dgx-h100=3/fortnight"], "gpu-hour"),
    (["--price", "dgx-h100=cheap"], "node-hour"),
    (["--gpus", "12"], "GPUs per node"),
    (["--schedules", "1f2b"], "interleaved"),
    (["--model", "gpt5"], "llama3-70b"),
])
def test_bad_input_is_one_line_listing_what_is_valid(capsys, tmp_path, args, needle):
    argv = ["--model", "small", "--tokens", "1e9", "--global-batch", "8", "--clusters", "dgx-h100", "--gpus", "8",
            "--out", str(tmp_path / "s")]
    for flag, value in zip(args[::2], args[1::2], strict=True):
        i = argv.index(flag) if flag in argv else len(argv)
        argv[i:i + 2] = [flag, value]
    code, out, err = run(capsys, "explore", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.slow
def test_price_per_node_hour_is_divided_by_gpus_per_node(capsys, tmp_path):
    code, out, _ = run(capsys, "explore", *SMALL, "--price", "aws-p4d=80/node-hour", "--price", "dgx-h100=1",
                       "--workers", "1", "--no-report", "--out", str(tmp_path / "s"), "--json")
    assert code == 0
    rows = json.loads((tmp_path / "s" / "results.json").read_text())["rows"]
    assert {r["design"]: r["price_per_gpu_hour_usd"] for r in rows} == {"aws-p4d": 10.0, "dgx-h100": 1.0}
    r = rows[0]
    assert r["cost_usd"] == pytest.approx(r["time_to_train_days"] * 24 * r["gpus"] * r["price_per_gpu_hour_usd"],
                                          rel=1e-6)


def _results(directory):
    return (Path(directory) / "results.json").read_bytes()


@pytest.mark.slow
def test_resume_after_killing_a_sweep_gives_the_uninterrupted_results(capsys, tmp_path):
    args = ["explore", "--model", "small", "--tokens", "1e9", "--global-batch", "64", "--clusters", "dgx-h100",
            "--gpus", "16,32", "--workers", "1", "--no-report"]
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli.main", *args, "--out", str(killed)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jsonl = killed / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not jsonl.exists() or jsonl.read_bytes().count(b"\n") < 64):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "results.json").exists(), "the sweep finished before it could be killed"
    written = jsonl.read_bytes().count(b"\n")
    assert written >= 64

    code, out, _ = run(capsys, "explore", "--resume", str(killed), "--workers", "1", "--no-report", "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["resumed"] >= written - 1 and summary["evaluated_this_run"] > 0  # nothing recomputed

    code, _, _ = run(capsys, *args, "--out", str(tmp_path / "whole"))
    assert code == 0
    assert _results(killed) == _results(tmp_path / "whole")


def test_resume_rejects_sweep_flags_and_non_sweep_directories(capsys, tmp_path):
    code, _, err = run(capsys, "explore", "--resume", str(tmp_path), "--workers", "1")
    assert code == 2 and "spec.json" in err
    code, _, err = run(capsys, "explore", "--resume", str(tmp_path), "--model", "small")
    assert code == 2 and "--model" in err


TINY = ["explore", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "16", "--workers", "1",
        "--no-report"]


def test_a_damaged_row_of_a_sweep_is_recomputed_on_resume(capsys, tmp_path):
    whole = tmp_path / "whole"
    assert run(capsys, *TINY, "--out", str(whole))[0] == 0
    lines = (whole / "results.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    rows[0]["step_time_s"], rows[1]["tp"] = [], "x"  # a resumed sweep compared a float with a list
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "spec.json").write_bytes((whole / "spec.json").read_bytes())
    (damaged / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run(capsys, "explore", "--resume", str(damaged), "--workers", "1", "--no-report", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["evaluated_this_run"] >= 2 and summary["resumed"] == len(rows) - 2  # the two damaged rows are not reused
    assert _results(damaged) == _results(whole)


@pytest.mark.parametrize("key,value,named", [("space", "x", "space='x' is invalid"), ("model", {}, "model={} is invalid"),
                                             ("clusters", [1], "clusters=(1,) is invalid"),
                                             ("global_batch", 10**30, "global_batch="),
                                             ("tokens", "1e9", "tokens='1e9' is invalid")])
def test_a_damaged_sweep_spec_is_one_line(capsys, tmp_path, key, value, named):
    whole = tmp_path / "whole"
    assert run(capsys, *TINY, "--out", str(whole))[0] == 0
    spec = json.loads((whole / "spec.json").read_text())
    spec[key] = value
    (whole / "spec.json").write_text(json.dumps(spec))
    code, _, err = run(capsys, "explore", "--resume", str(whole), "--workers", "1", "--no-report")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "spec.json: not a sweep spec" in err and named in err, err


SPACE = SearchSpace(schedules=("1f1b", "zb-h1"), zero=(1, 3), microbatch_sizes=(1, 2))


def _spec():
    return SweepSpec(model="small", tokens=1e9, global_batch=32, clusters=("dgx-h100",), gpus=(8, 16), space=SPACE)


@pytest.mark.slow
def test_local_processes_give_the_serial_results(capsys, tmp_path):
    serial = tmp_path / "serial"
    assert main(["explore", "--model", "small", "--tokens", "1e9", "--global-batch", "32", "--clusters", "dgx-h100",
                 "--gpus", "8,16", "--schedules", "1f1b,zb-h1", "--zero", "1,3", "--microbatch-sizes", "1,2",
                 "--workers", "1", "--no-report", "--out", str(serial)]) == 0
    run_sweep(_spec(), tmp_path / "pool", LocalProcesses(2), keep=3)  # keep: the CLI's default (--top, --verify 3)
    assert _results(serial) == _results(tmp_path / "pool")


def test_a_wide_backend_reports_the_serial_rows(tmp_path):
    """Issue 28: a Dask/Ray sweep (8 plans per wave) timed and wrote 21 plans where a local one wrote 19.
    Waves of 8 still time more plans, but every backend reports the rows one plan at a time would time."""

    class Wide(InProcess):
        width = 8  # DaskCluster's and RayCluster's waves, in this process

    # a grid whose step-time bound skips plans one at a time (8 of 11 timed) but not in waves of 8
    spec = SweepSpec(model="gpt3-1.7b", tokens=1e9, global_batch=64, clusters=("dgx-h100",), gpus=(16,))
    serial = run_sweep(spec, tmp_path / "serial", InProcess(), keep=3)
    wide = run_sweep(spec, tmp_path / "wide", Wide(), keep=3)
    assert wide.evaluated > serial.evaluated == len(serial.rows)  # the wide waves timed extra plans
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / "wide" / name).read_bytes()


@pytest.mark.slow  # a real Dask LocalCluster (2 worker processes), ~14 s; the wide-backend test above stays quick
def test_dask_local_cluster_gives_the_serial_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    run_sweep(_spec(), tmp_path / "serial", InProcess())
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        run_sweep(_spec(), tmp_path / "dask", DaskCluster(cluster.scheduler_address))
    assert _results(tmp_path / "serial") == _results(tmp_path / "dask")


def test_ray_local_cluster_gives_the_serial_results(tmp_path):
    ray = pytest.importorskip("ray")
    from sim.explore.backends import RayCluster

    run_sweep(_spec(), tmp_path / "serial", InProcess())
    try:
        run_sweep(_spec(), tmp_path / "ray", RayCluster("local"))
    finally:
        ray.shutdown()
    assert _results(tmp_path / "serial") == _results(tmp_path / "ray")
