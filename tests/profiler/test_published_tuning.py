"""A published row that omits its micro-batch size runs at the size a tuned benchmark would pick:
the fastest of explore's default sizes dividing the batch per data-parallel rank that fits in HBM."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from profiler.validate.published.jobs import RowJob, job_for_row
from profiler.validate.published.run import simulate_step, validate_row
from profiler.validate.published.tuning import tuned_row_job
from sim.explore.spec import MICROBATCH_SIZES
from tests.profiler.test_published_jobs import rows_from

SMALL_MEGATRON = """
name = "small-mcore"
gpu = "H100 (variant not stated)"
gpus = 16
framework = "Megatron-LM / Megatron-Core r0.8.0"
dtype = "bf16"
layers = 4
hidden = 2048
heads = 16
kv_heads = 16
ffn_hidden = 8192
ffn_kind = "gelu"
vocab = 32768
seq_len = 2048
tp = 8
pp = 1
cp = 1
dp = 2
zero = 1
sequence_parallel = true
recompute = "none"
global_batch = 8
measured_step_s = 0.1
"""


def _row_job(tmp_path: Path, text: str) -> RowJob:
    return job_for_row(rows_from(tmp_path, text)[0])


def test_choices_are_the_swept_sizes_dividing_the_batch_per_rank(tmp_path: Path) -> None:
    assert MICROBATCH_SIZES == (1, 2, 4)
    assert _row_job(tmp_path, SMALL_MEGATRON).microbatch_choices == (1, 2, 4)  # 4 sequences per DP rank
    six = SMALL_MEGATRON.replace("global_batch = 8", "global_batch = 12")
    assert _row_job(tmp_path, six).microbatch_choices == (1, 2)  # 6 per rank: 4 does not divide it
    stated = SMALL_MEGATRON + "microbatch_size = 2\n"
    assert _row_job(tmp_path, stated).microbatch_choices == ()
    no_batch = SMALL_MEGATRON.replace("global_batch = 8\n", "")
    assert _row_job(tmp_path, no_batch).microbatch_choices == ()  # one micro-batch per step: nothing to tune


def _fake(steps: dict[int, tuple[float, bool]]):
    """A stand-in simulator: micro-batch size -> (step s, fits)."""
    return lambda job: steps[job.plan.microbatch_size]


def test_the_fastest_fitting_size_wins_and_is_noted(tmp_path: Path) -> None:
    rj = _row_job(tmp_path, SMALL_MEGATRON)
    cases = {
        "fastest fits": ({1: (3.0, True), 2: (2.0, True), 4: (2.5, True)}, 2),
        "fastest does not fit": ({1: (3.0, True), 2: (2.0, True), 4: (1.0, False)}, 2),
        "nothing fits": ({1: (3.0, False), 2: (2.0, False), 4: (1.0, False)}, 1),
        "tie": ({1: (2.0, True), 2: (2.0, True), 4: (2.0, True)}, 1),
    }
    for name, (steps, expected) in cases.items():
        chosen, result = tuned_row_job(rj, _fake(steps), lambda s: s[0], lambda s: s[1])
        assert chosen.job.plan.microbatch_size == expected, name
        assert result == steps[expected], name
        mbs_notes = [n.text for n in chosen.assumed if n.code == "mbs"]
        assert mbs_notes == [f"micro-batch size not stated: {expected}, the fastest of 1/2/4 that fits HBM "
                             "(a tuned benchmark's choice; see profiler.validate.published.tuning)"], name


def test_stated_size_is_simulated_once_as_given(tmp_path: Path) -> None:
    rj = _row_job(tmp_path, SMALL_MEGATRON + "microbatch_size = 2\n")
    calls: list[int] = []

    def sim(job):
        calls.append(job.plan.microbatch_size)
        return (1.0, True)

    chosen, _ = tuned_row_job(rj, sim, lambda s: s[0], lambda s: s[1])
    assert calls == [2] and chosen is rj


def test_validate_row_reports_the_real_simulation_of_the_chosen_size(tmp_path: Path) -> None:
    row = rows_from(tmp_path, SMALL_MEGATRON)[0]
    result = validate_row(row)
    assert result.sim is not None and result.row_job is not None
    chosen = result.row_job.job.plan.microbatch_size
    base = job_for_row(row).job
    steps = {m: simulate_step(dataclasses.replace(base, plan=dataclasses.replace(base.plan, microbatch_size=m)))
             for m in (1, 2, 4)}
    fitting = {m: s.step_s for m, s in steps.items() if s.fits_hbm}
    assert chosen == min(fitting, key=lambda m: (fitting[m], m))
    assert result.sim.step_s == steps[chosen].step_s



RATIO_ONLY_TITAN = SMALL_MEGATRON.replace('framework = "Megatron-LM / Megatron-Core r0.8.0"',
                                          'framework = "torchtitan (PyTorch FSDP2 + DTensor TP)"') \
    .replace('recompute = "none"\n', "").replace("sequence_parallel = true\n", "") \
    .replace("measured_step_s = 0.1\n", "ratio_only = true\nmeasured_tokens_per_s_per_gpu = 100\n")


def test_a_ratio_only_row_that_fits_nowhere_runs_with_the_least_activation_memory(tmp_path: Path) -> None:
    """Nothing fitting, the tuning reports the first candidate tried: full recompute at the smallest
    size (the nearest to fitting), not no recompute (the most memory)."""
    rj = _row_job(tmp_path, RATIO_ONLY_TITAN)
    assert rj.recompute_choices == ("full", "selective", "none")

    def never_fits(job):
        return (1.0 if job.plan.recompute == "none" else 2.0, False)

    chosen, _ = tuned_row_job(rj, never_fits, lambda s: s[0], lambda s: s[1])
    assert (chosen.job.plan.microbatch_size, chosen.job.plan.recompute) == (1, "full")


def test_unstated_sequence_parallelism_follows_the_framework(tmp_path: Path) -> None:
    """torchtitan's TP is sequence-parallel (apply_tp @9dec370): a torchtitan row with TP and no
    stated SP runs with it; a Megatron-Core row keeps the documented default, off; a stated value wins."""
    titan = _row_job(tmp_path, RATIO_ONLY_TITAN)
    assert titan.job.plan.sequence_parallel
    assert [n.text for n in titan.assumed if n.code == "sp"] == [
        "sequence parallelism not stated: on, as torchtitan runs TP"]
    stated_off = _row_job(tmp_path, RATIO_ONLY_TITAN + "sequence_parallel = false\n")
    assert not stated_off.job.plan.sequence_parallel and not [n for n in stated_off.assumed if n.code == "sp"]
    mcore = _row_job(tmp_path, SMALL_MEGATRON.replace("sequence_parallel = true\n", ""))
    assert not mcore.job.plan.sequence_parallel
    assert [n.text for n in mcore.assumed if n.code == "sp"] == ["sequence parallelism not stated: off"]
