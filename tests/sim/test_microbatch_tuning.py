"""The micro-batch size rule (sim/microbatch_tuning.py): a job stating its batch but not its
micro-batch size runs at the fastest size that fits, checked against each size simulated on its own."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.cli.main import main
from sim.job import DEFAULT_JOB, resolve_job
from sim.memory_summary import fits
from sim.microbatch_tuning import candidate_sizes, tune_microbatch, wants_auto
from sim.simulate import simulate


@pytest.mark.parametrize(("settings", "auto"), [
    ({"global_batch": 64}, True),
    ({"microbatch_size": "auto"}, True),
    ({"global_batch": 64, "microbatch_size": 2}, False),
    ({"global_batch": 64, "microbatches": 8}, False),
    ({}, False),
])
def test_only_an_unsplit_batch_or_auto_asks_for_the_rule(settings: dict, auto: bool) -> None:  # type: ignore[type-arg]
    assert wants_auto(settings) is auto


def _job(**settings: object):  # type: ignore[no-untyped-def]
    return resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 1, "tp": 2, "pp": 1,
                        "global_batch": 32, **settings}, defaults=DEFAULT_JOB)


def test_the_choice_is_the_fastest_per_sequence_of_the_sizes_that_fit() -> None:
    job = _job()
    chosen, sizes = tune_microbatch(job, simulate, lambda r: r.metrics.step_time_s, fits)
    assert sizes == candidate_sizes(job) == (1, 2, 4)
    alone = {m: simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, microbatch_size=m)))
             for m in sizes}
    fitting = {m: r.metrics.step_time_s for m, r in alone.items() if fits(r)}
    assert fitting and chosen.job.plan.microbatch_size == min(fitting, key=lambda m: (fitting[m], m))
    assert chosen.result.metrics.step_time_s == pytest.approx(fitting[chosen.job.plan.microbatch_size], rel=1e-12)


def test_a_size_that_does_not_fit_is_never_chosen_while_another_fits() -> None:
    """GPT-3 18B, TP8 on one DGX A100, 8k tokens without recomputation: only one sequence per
    micro-batch fits in 80 GB; the larger sizes would be faster."""
    job = resolve_job({"model": "gpt3-18b", "cluster": "dgx-a100", "nodes": 1, "tp": 8, "pp": 1, "seq_len": 8192,
                       "global_batch": 16, "recompute": "none"}, defaults=DEFAULT_JOB)
    chosen, sizes = tune_microbatch(job, simulate, lambda r: r.metrics.step_time_s, fits)
    alone = {m: simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, microbatch_size=m)))
             for m in sizes}
    assert [fits(alone[m]) for m in sizes] == [True, False, False]
    assert alone[4].metrics.step_time_s < alone[1].metrics.step_time_s
    assert chosen.job.plan.microbatch_size == 1 and fits(chosen.result)


def test_the_flag_the_job_file_and_an_unsplit_batch_agree(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    common = ["simulate", "--json", "--no-report", "--model", "gpt3-1.7b", "--cluster", "dgx-a100", "--nodes", "1",
              "--tp", "2", "--pp", "1", "--global-batch", "32"]
    outputs = []
    config = tmp_path / "job.toml"
    config.write_text('[plan]\nmicrobatch_size = "auto"\n')
    for extra in ([], ["--microbatch-size", "auto"], ["--config", str(config)]):
        assert main(common + extra) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]["microbatch_size_auto"]["tried"] == [1, 2, 4]


def test_a_stated_split_prints_no_choice(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "--json", "--no-report", "--microbatch-size", "2"]) == 0
    assert "microbatch_size_auto" not in json.loads(capsys.readouterr().out)


def test_a_bad_value_is_one_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "job.toml"
    config.write_text('[plan]\nmicrobatch_size = "big"\n')
    assert main(["simulate", "--json", "--no-report", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "microbatch_size" in err[0] and "auto" in err[0]


def test_compare_splits_every_schedule_alike(capsys) -> None:  # type: ignore[no-untyped-def]
    """One size for the schedules compared, valid for each (interleaved needs the micro-batch
    count divisible by the pipeline)."""
    assert main(["compare", "--json", "--no-report", "--model", "small", "--schedules", "1f1b,interleaved",
                 "--global-batch", "64"]) == 0
    out = json.loads(capsys.readouterr().out)
    chosen = {s["microbatch_size_auto"]["chosen"] for s in out}
    assert len(chosen) == 1 and chosen <= {1, 2, 4}


def test_sizes_the_pipeline_schedule_refuses_are_not_tried() -> None:
    """DualPipeV needs 2 x pp micro-batches: with 16 sequences per pipeline and pp 4, size 4 (4
    micro-batches) is not a candidate. Was: chosen as the fastest, then the run failed with
    'dualpipev needs at least 2*pp = ... micro-batches' (docs/model/moe.md's DeepSeek-V3 command)."""
    settings = {"model": "small", "cluster": "dgx-h100", "nodes": 4, "tp": 1, "pp": 4, "global_batch": 128,
                "schedule": "dualpipev", "vpp": 2}
    job = resolve_job(settings, defaults=DEFAULT_JOB)
    assert job.plan.dp == 8 and candidate_sizes(job) == (1, 2, 4)
    chosen, sizes = tune_microbatch(job, simulate, lambda r: r.metrics.step_time_s, fits)
    assert sizes == (1, 2) and chosen.job.plan.num_microbatches >= 8


def test_when_no_size_suits_the_schedule_its_own_error_is_the_one_line(capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["simulate", "--no-report", "--model", "small", "--cluster", "dgx-h100", "--nodes", "4", "--tp", "1",
                 "--pp", "4", "--global-batch", "32", "--schedule", "dualpipev", "--vpp", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "dualpipev needs at least 2*pp = 8 micro-batches" in err, err


def test_a_full_job_compares_sizes_folded_and_simulates_only_the_chosen_one_in_full() -> None:
    """--full: the candidates run folded (the same rule, a fraction of the work), the chosen size
    once with every rank; the choice is the one comparing the sizes in full would make."""
    job = dataclasses.replace(_job(nodes=2, pp=2, global_batch=64), folded=False)
    ran: list[tuple[int, bool]] = []

    def recording(j):  # type: ignore[no-untyped-def]
        ran.append((j.plan.microbatch_size, j.folded))
        return simulate(j)

    chosen, sizes = tune_microbatch(job, recording, lambda r: r.metrics.step_time_s, fits)
    size = chosen.job.plan.microbatch_size
    assert ran == [(m, True) for m in sizes] + [(size, False)]
    assert not chosen.job.folded and len(chosen.result.simulated_ranks) == job.plan.world_size
    in_full = {m: simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, microbatch_size=m)))
               for m in sizes}
    fitting = {m: r.metrics.step_time_s for m, r in in_full.items() if fits(r)}
    assert size == min(fitting, key=lambda m: (fitting[m], m))
    assert chosen.result.metrics.step_time_s == in_full[size].metrics.step_time_s
