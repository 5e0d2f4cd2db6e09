"""NeMo 24.07 and Megatron-Bridge 25.11/26.02 FP8 runs on H100 (docs/published-nemo-fp8-runs.toml): the
file parses, every row is an FP8 job of the nemo preset with the recipe its source states, every
derived step time follows from the published throughput, and the file is one of `--published all`."""

from __future__ import annotations

import re

import pytest

from profiler.validate.published.frameworks import framework_for
from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.rows import (
    CALIBRATION_FILES,
    NEMO_FP8_FILE,
    PublishedRow,
    read_rows,
)

RECIPE = {"nemo-2407-fp8": "delayed", "megatron-bridge-fp8": "tensorwise"}
"""NeMo 24.07's configs: TE DelayedScaling (fp8_amax_history_len, fp8_amax_compute_algo);
Megatron-Bridge's FP8-CS: current (per-tensor) scaling."""


@pytest.fixture(scope="module")
def rows() -> list[PublishedRow]:
    return read_rows(NEMO_FP8_FILE)


def test_both_families_and_a_commit_for_every_source(rows: list[PublishedRow]) -> None:
    families = [r.family for r in rows]
    assert families.count("nemo-2407-fp8") == 12 and families.count("megatron-bridge-fp8") == 5
    for row in rows:
        assert row.source and re.search(r"@ [0-9a-f]{10,40}", row.source)


def test_every_row_is_an_fp8_job_of_the_nemo_preset(rows: list[PublishedRow]) -> None:
    for row in rows:
        assert framework_for(row.framework).preset == "nemo"
        plan = job_for_row(row).job.plan
        assert plan.world_size == row.gpus
        assert (plan.tp, plan.pp, plan.cp, plan.dp) == (row.tp, row.pp, row.cp, row.dp)
        assert plan.sequence_parallel == (row.tp > 1)
        assert plan.fp8_recipe == RECIPE[row.family]


def test_derived_step_times_follow_from_the_published_throughput(rows: list[PublishedRow]) -> None:
    for row in rows:
        assert row.step_basis == "derived"
        assert row.measured_tokens_per_s_per_gpu is not None and row.global_batch is not None
        expected = row.global_batch * row.seq_len / (row.measured_tokens_per_s_per_gpu * row.gpus)
        assert row.measured_step_s == pytest.approx(expected, rel=1e-4)
        assert f"| {row.measured_tokens_per_s_per_gpu:d} " in (row.source or "")  # the quoted row


def test_the_file_is_part_of_all() -> None:
    assert NEMO_FP8_FILE in CALIBRATION_FILES


def test_nemo_without_megatron_core_maps_to_the_nemo_preset_and_others_keep_theirs() -> None:
    assert framework_for("NeMo 24.07").preset == "nemo"
    assert framework_for("NeMo AutoModel (FSDP2, TE, DeepEP)").key == "automodel"
    assert framework_for("Megatron-Bridge 25.11 (NeMo container 25.11)").key == "megatron-bridge"


def test_megatron_bridge_rows_run_the_nemo_preset() -> None:
    """A row naming Megatron-Bridge runs NeMo's recipes' preset even when its text also names
    Megatron-Core (the MoE file's 'Megatron-Bridge (Megatron-Core), NeMo 26.02')."""
    from profiler.validate.published.frameworks import framework_for

    assert framework_for("Megatron-Bridge (Megatron-Core), NeMo 26.02").preset == "nemo"
    assert framework_for("Megatron-LM / Megatron-Core r0.8.0").preset == "megatron-core"
