"""FP8/BF16 twins in a published-runs file: the speedup arithmetic, and ratio-only twins simulated
at the batch and checkpointing a tuning source would pick."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.pairs import pair_results, summarize_pairs
from profiler.validate.published.rows import read_rows
from profiler.validate.published.run import RowResult, SimulatedStep, validate_rows

TWIN = """[[run]]
name = "{name}"
pair = "{pair}"
source_group = "g"
gpu = "H100 80GB"
gpus = 8
framework = "Megatron-LM / Megatron-Core r0.8.0"
dtype = "{dtype}"
layers = 4
hidden = 1024
heads = 16
ffn_hidden = 4096
vocab = 51200
seq_len = 2048
tp = 1
pp = 1
dp = 8
zero = 1
{batch}
measured_fp8_speedup = {speedup}
"""
STATED = "microbatch_size = 1\nglobal_batch = 16\nmeasured_step_s = 1.0"
RATIO_ONLY = "ratio_only = true"


def _file(tmp_path: Path, batch: str, speedup: float = 1.25) -> Path:
    path = tmp_path / "twins.toml"
    path.write_text(TWIN.format(name="a-bf16", pair="a-fp8", dtype="bf16", batch=batch, speedup=speedup)
                    + TWIN.format(name="a-fp8", pair="a-bf16", dtype="fp8", batch=batch, speedup=speedup))
    return path


def _results(path: Path, steps: dict[str, float]) -> list[RowResult]:
    return [RowResult(row=row, row_job=job_for_row(row),
                      sim=SimulatedStep(step_s=steps[row.name], peak_memory_bytes=1.0, reserved_memory_bytes=1.0,
                                        fits_hbm=True, wall_s=0.0)) for row in read_rows(path)]


def test_speedup_is_the_throughput_ratio_and_its_error_a_difference(tmp_path: Path) -> None:
    """Same batch: simulated speedup = BF16 step / FP8 step (2.0 / 1.6 = 1.25); error = sim - measured."""
    pairs = pair_results(_results(_file(tmp_path, STATED, speedup=1.1), {"a-bf16": 2.0, "a-fp8": 1.6}))
    assert len(pairs) == 1 and (pairs[0].bf16, pairs[0].fp8) == ("a-bf16", "a-fp8")
    assert pairs[0].simulated == pytest.approx(1.25) and pairs[0].speedup_err == pytest.approx(0.15)
    summary = summarize_pairs(pairs)
    assert summary is not None and summary.stated_pairs == 1 and summary.max_abs_err == pytest.approx(0.15)


def test_ratio_only_twins_are_simulated_at_a_tuned_batch_and_checkpointing(tmp_path: Path) -> None:
    """A twin with no step time (ratio_only) is simulated: its micro-batch size and recompute mode
    are the fastest per sequence that fit (the source tuned both per twin), one micro-batch per step."""
    results = validate_rows(read_rows(_file(tmp_path, RATIO_ONLY)))
    assert all(not r.skipped and r.step_err is None for r in results)
    for r in results:
        assert r.row_job is not None
        notes = {n.code: n.text for n in r.assumed}
        plan = r.row_job.job.plan
        assert f"micro-batch size not stated: {plan.microbatch_size}," in notes["mbs"]
        assert f"activation checkpointing not stated: {plan.recompute}," in notes["recompute"]
        assert plan.global_batch == plan.microbatch_size * plan.dp
    pairs = pair_results(results)
    assert len(pairs) == 1 and pairs[0].ratio_only and pairs[0].simulated is not None
