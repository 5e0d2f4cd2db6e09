"""The size guard (issue 15): estimates bound real runs, too-large runs are one-line errors naming
the flags to reduce, long runs are announced, explore prunes plans too large to evaluate."""

import tracemalloc

import pytest

import sim.size_guard as size_guard
from sim.cli.main import main
from sim.job import resolve_job
from sim.simulate import build_priced, simulate
from sim.size_guard import SizeEstimate, check_size, estimate_job, estimate_plan_tasks, span_detail

JOBS = [
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 32},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 32, "steps": 3},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 4, "global_batch": 64},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 2, "pp": 8, "global_batch": 16,
     "schedule": "interleaved", "vpp": 2},
    {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2, "global_batch": 64, "zero": 3},
    {"model": "small", "cluster": "dgx-h100", "nodes": 2, "tp": 1, "pp": 2, "global_batch": 64, "full": True},
    {"model": "small", "cluster": "cpu-host", "gpus_per_node": 2, "tp": 1, "pp": 2, "global_batch": 16},
    {"model": "llama3-70b", "cluster": "dgx-h100", "nodes": 8, "tp": 8, "pp": 4, "global_batch": 64},
    {"model": "qwen3-235b-a22b", "cluster": "dgx-h100", "nodes": 2, "pp": 2, "dp": 8, "ep": 4, "global_batch": 32,
     "recompute": "full", "zero": 1, "uneven_stages": True},
    {"model": "qwen3-235b-a22b", "cluster": "dgx-h100", "nodes": 2, "pp": 2, "dp": 8, "ep": 8, "global_batch": 32,
     "recompute": "full", "zero": 1, "uneven_stages": True},
]


@pytest.mark.parametrize("settings", JOBS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items())[:60])
def test_task_estimate_is_within_2_5x_of_the_built_graph(settings):
    job = resolve_job(settings)
    real = len(build_priced(job).graph)
    estimate = estimate_job(job).tasks
    assert real / 2.5 <= estimate <= real * 2.5, (real, estimate)


def test_memory_estimate_bounds_the_simulation_within_a_factor():
    job = resolve_job({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 512})
    estimate = estimate_job(job)
    tracemalloc.start()
    result = simulate(job)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert estimate.spans / 2.5 <= len(result.timeline) <= estimate.spans
    assert peak / 2.5 <= estimate.bytes and peak <= 2.5 * estimate.bytes, (peak, estimate.bytes)


def test_estimates_grow_with_what_makes_a_run_larger():
    base = {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2}
    small, more_mb, more_steps, full = (estimate_job(resolve_job({**base, **extra})) for extra in (
        {"global_batch": 8}, {"global_batch": 64}, {"global_batch": 8, "steps": 4}, {"global_batch": 8, "full": True}))
    assert small.spans < more_mb.spans and small.spans < more_steps.spans and small.spans < full.spans
    job = resolve_job({**base, "global_batch": 8})
    assert estimate_plan_tasks(job.plan, 8, ranks=2, steps=2) == 2 * estimate_plan_tasks(job.plan, 8, ranks=2)


def test_check_size_is_one_line_naming_the_flags():
    estimate = SizeEstimate(tasks=10**9, spans=10**9, bytes=2.0 * 2**40, seconds=1e5)
    with pytest.raises(ValueError) as exc:
        check_size(estimate, "--global-batch", budget=2**30)
    text = str(exc.value)
    assert "\n" not in text and "--global-batch" in text and "2048.0 GiB" in text and "1.0 GiB" in text
    check_size(estimate, "--global-batch", budget=4.0 * 2**40)  # under the budget: no error


@pytest.mark.parametrize(("argv", "needle"), [
    (["simulate", "--global-batch", "100000000"], "--global-batch"),
    (["simulate", "--nodes", "1000000"], "--nodes"),
    (["simulate", "--microbatches", "1000000", "--full"], "--full"),
    (["compare", "--microbatches", "10000000"], "--schedules"),
    (["schedule", "--pp", "1000000"], "--pp"),
    (["schedule", "--microbatches", "100000000"], "--microbatches"),
])
def test_too_large_runs_are_refused_in_one_line(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "too large for this machine" in err and needle in err
    assert not list(tmp_path.iterdir())


def test_long_runs_are_announced_on_stderr(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(size_guard, "NOTICE_SECONDS", 0.0)
    assert main(["simulate", "--model", "small", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "is large (~" in err and "may take a while" in err
    monkeypatch.setattr(size_guard, "NOTICE_SECONDS", 1e9)
    assert main(["simulate", "--model", "small", "--no-report"]) == 0
    assert capsys.readouterr().err == ""


def test_explore_prunes_plans_too_large_to_evaluate(capsys, tmp_path):
    # issue 15: this sweep grew to 22 GB; now every plan is pruned before its schedule is built
    code = main(["explore", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch",
                 "100000000", "--schedules", "gpipe,1f1b", "--out", str(tmp_path / "ex"), "--no-report",
                 "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "too large to evaluate" in err and "--global-batch" in err


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--workers", "257"], ["--top", "0"], ["--verify", "-1"],
                                  ["--global-batch", "0"], ["--seq-len", "0"]])
def test_explore_flag_limits(capsys, tmp_path, argv):
    code = main(["explore", "--model", "small", "--cluster", "dgx-h100", "--gpus", "8", "--out",
                 str(tmp_path / "ex"), "--no-report", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and argv[0] in err


def test_the_guard_counts_the_span_detail_simulate_writes() -> None:
    # docs/speed.md's --full GPT-3 175B on 1,024 A100 (~330k tasks): simulate writes one span per task
    # and lane (about 1M spans, 0.4 GiB measured), so the guard must not count 28M op spans
    big = resolve_job({"model": "gpt3-175b", "cluster": "dgx-a100", "nodes": 128, "tp": 8, "pp": 8, "dp": 16,
                       "global_batch": 1536, "microbatch_size": 1, "sequence_parallel": True, "full": True})
    assert span_detail(big) == "task"
    assert estimate_job(big).spans == 3 * estimate_job(big).tasks and estimate_job(big).bytes < 2 * 2**30
    small = resolve_job({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1, "tp": 8, "pp": 1,
                         "global_batch": 2})
    assert span_detail(small) == "op"
