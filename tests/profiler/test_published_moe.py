"""Published MoE rows (docs/published-moe-runs.toml): every row maps onto an expert-parallel job
of its MoE preset, derived step times follow from the published throughput, and a row whose
dimensions are not its preset's is refused with a one-line reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.notes import Unexpressible
from profiler.validate.published.rows import read_rows
from schedules.moe_presets import get_moe_model

FILE = Path(__file__).resolve().parents[2] / "docs" / "published-moe-runs.toml"


def test_every_row_is_an_expert_parallel_job_of_its_preset():
    rows = read_rows(FILE)
    assert len(rows) >= 7
    for row in rows:
        assert row.moe_model and row.source and "@" in row.source  # a commit for every source
        rj = job_for_row(row)
        preset = get_moe_model(row.moe_model)
        assert rj.job.model.moe == preset.moe and rj.job.model.num_layers == preset.num_layers
        assert rj.job.plan.ep == row.ep and rj.job.plan.moe_imbalance == 1.0
        assert rj.job.plan.world_size == row.gpus


def test_derived_step_times_follow_from_the_published_throughput():
    for row in read_rows(FILE):
        if row.step_basis == "derived":
            assert row.measured_tokens_per_s_per_gpu is not None and row.global_batch is not None
            expected = row.global_batch * row.seq_len / (row.measured_tokens_per_s_per_gpu * row.gpus)
            assert row.measured_step_s == pytest.approx(expected, rel=1e-4)


def test_a_row_unlike_its_preset_is_refused():
    row = dataclasses.replace(read_rows(FILE)[0], layers=35)
    with pytest.raises(Unexpressible, match="^layers 35 differs from the gpt-oss-120b preset's 36$"):
        job_for_row(row)


def test_an_unknown_preset_is_refused():
    row = dataclasses.replace(read_rows(FILE)[0], moe_model="grok-1")
    with pytest.raises(Unexpressible, match="unknown MoE model 'grok-1'"):
        job_for_row(row)
