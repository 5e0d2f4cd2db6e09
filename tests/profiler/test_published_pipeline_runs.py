"""A published row whose step runs the pipeline schedule several times (``pipeline_runs``: NeMo
AutoModel's gradient accumulation, one ``schedule.step`` per local batch)."""

from __future__ import annotations

import dataclasses

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.notes import Unexpressible
from profiler.validate.published.rows import read_rows
from profiler.validate.published.run import _runs_step, simulate_step
from sim.job import resolve_job

ROWS = "docs/published-moe-runs.toml"


def _rows() -> dict:
    return {r.name: r for r in read_rows(ROWS)}


def test_the_1024_gpu_automodel_row_runs_its_schedule_once_per_local_batch():
    """The table: GBS 8192, LBS 8, GA 4, DP 256, MBS 1: 32 micro-batches a step, 8 per run."""
    rows = _rows()
    row_job = job_for_row(rows["automodel-h100x1024-deepseek-v3-bf16"])
    assert row_job.pipeline_runs == 4 and row_job.job.plan.num_microbatches == 32
    assert job_for_row(rows["automodel-h100x256-deepseek-v3-bf16"]).pipeline_runs == 1  # GA 1: one run
    assert job_for_row(rows["automodel-h100x64-gpt-oss-120b-bf16"]).pipeline_runs == 1  # no pipeline


def test_runs_that_do_not_divide_the_micro_batches_are_refused():
    row = dataclasses.replace(_rows()["automodel-h100x1024-deepseek-v3-bf16"], pipeline_runs=3)
    with pytest.raises(Unexpressible, match="pipeline_runs 3"):
        job_for_row(row)


def test_a_step_of_runs_is_that_many_steps_of_a_share_of_the_batch():
    job = resolve_job(dict(model="llama3-8b", cluster="dgx-h100", nodes=1, gpus_per_node=2, pp=2, dp=1,
                           global_batch=8, layers=4))
    quarter = simulate_step(dataclasses.replace(job, plan=dataclasses.replace(job.plan, global_batch=2)))
    whole = simulate_step(job)
    step = _runs_step(job, 4)
    assert step.step_s == pytest.approx(4 * quarter.step_s)
    assert step.step_s > whole.step_s  # four pipeline fills and drains instead of one
    assert step.peak_memory_bytes == quarter.peak_memory_bytes
