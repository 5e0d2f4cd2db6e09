"""The repository's calibration files (docs/published-runs.toml, docs/published-fp8-runs.toml,
docs/published-moe-runs.toml): every row is simulated or skipped with a reason, each simulated job
processes the tokens its source says, and the in-repo copies of the shared set equal the shared
files when those are beside the repository (skipped when absent: a user's clone has none)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tomllib

from profiler.validate.published.rows import DENSE_FILE, FP8_FILE, REPO, read_rows
from profiler.validate.published.run import RowResult, validate_rows
from profiler.validate.published.summary import summarize

SHARED = REPO.parent / "shared" / "published-runs"


@pytest.fixture(scope="module")
def results() -> list[RowResult]:
    return validate_rows(read_rows(DENSE_FILE))


@pytest.mark.parametrize(("ours", "theirs"), [(DENSE_FILE, "runs.toml"), (FP8_FILE, "fp8-runs.toml")])
def test_in_repo_copies_equal_the_shared_files(ours: Path, theirs: str) -> None:
    shared = SHARED / theirs
    if not shared.is_file():
        pytest.skip(f"{shared} is absent")
    assert ours.read_bytes() == shared.read_bytes()


@pytest.mark.slow  # simulates every published row (~11 s CPU)
def test_every_row_is_simulated_or_has_a_reason(results: list[RowResult]) -> None:
    runs = tomllib.loads(DENSE_FILE.read_text())["run"]
    assert [r.row.name for r in results] == [run["name"] for run in runs]
    for r in results:
        if r.skipped:
            assert r.reason and "\n" not in r.reason
        else:
            assert r.sim is not None and math.isfinite(r.sim.step_s) and r.sim.step_s > 0
    assert sum(not r.skipped for r in results) >= len(results) - 6


@pytest.mark.slow  # simulates every published row (~11 s CPU)
def test_rows_without_a_measured_step_are_skipped(results: list[RowResult]) -> None:
    for r in results:
        if r.row.measured_step_s is None:
            assert r.skipped and (r.reason or "").startswith("no measured step time")


@pytest.mark.slow  # simulates every published row (~11 s CPU)
def test_each_job_processes_the_sources_tokens(results: list[RowResult]) -> None:
    """global batch x seq / (measured step x GPUs) of the built job is the source's tokens/s/GPU
    (published, or derived by the README's own arithmetic): the batch mapping is the source's."""
    for r in results:
        measured = r.row.measured_step_s
        if r.row_job is None or r.row.measured_tokens_per_s_per_gpu is None or measured is None:
            continue
        job = r.row_job.job
        tokens = job.plan.global_batch * job.model.seq_len / (measured * r.row.gpus)
        assert tokens == pytest.approx(r.row.measured_tokens_per_s_per_gpu, rel=0.01), r.row.name
        assert job.plan.world_size == r.row.gpus == job.cluster.num_gpus


@pytest.mark.slow  # simulates every published row (~11 s CPU)
def test_published_memory_rows_are_compared(results: list[RowResult]) -> None:
    with_memory = [r for r in results if r.row.measured_peak_memory_gib is not None and not r.skipped]
    assert with_memory and all(r.memory_err is not None and r.memory_kind for r in with_memory)


@pytest.mark.slow  # simulates every published row (~11 s CPU)
def test_the_calibration_set_meets_issue_14s_bar(results: list[RowResult]) -> None:
    """Issue 14's acceptance on the shared file: step-time MAPE <= 10%, no row beyond 25%, every
    published peak memory within 10% (a regression guard: the model is never fitted to these rows)."""
    summary = summarize(results)
    assert summary.step is not None and summary.worst is not None
    assert summary.step.mape <= 0.10, f"MAPE {summary.step.mape:.1%}"
    assert abs(summary.worst[1]) <= 0.25, f"worst {summary.worst}"
    memory = {r.row.name: r.memory_err for r in results if r.memory_err is not None}
    assert memory and all(abs(e) <= 0.10 for e in memory.values()), memory
