"""Flags modify the embedded default job (issue 16): a setting not given keeps the default job's
value (llama3-8b on 2 x dgx-h100, TP4 PP2, micro-batch 1, 16 micro-batches per pipeline, 1F1B);
dp is the GPUs left; the job simulated is printed first. Library callers of resolve_job keep
their old defaults."""

import json

import pytest

from sim.cli.main import main
from sim.job import DEFAULT_JOB, DEFAULTS, default_vpp, describe_job, resolve_job


def plan_of(argv):
    """(tp, cp, pp, dp, vpp, schedule, global_batch, micro-batches, nodes) that ``argv`` resolves to."""
    from sim.cli.job_args import job_from_args
    from sim.cli.main import build_parser
    job = job_from_args(build_parser().parse_args(["simulate", *argv]))
    p = job.plan
    return (p.tp, p.cp, p.pp, p.dp, p.vpp, p.schedule, p.global_batch, p.num_microbatches, job.cluster.nodes)


@pytest.mark.parametrize(("argv", "expected"), [
    ([], (4, 1, 2, 2, 1, "1f1b", 32, 16, 2)),
    (["--zero", "1"], (4, 1, 2, 2, 1, "1f1b", 32, 16, 2)),  # was TP1 PP1 DP16
    (["--nodes", "4"], (4, 1, 2, 4, 1, "1f1b", 64, 16, 4)),  # was TP1 DP32, global batch 64
    (["--tp", "4", "--pp", "2"], (4, 1, 2, 2, 1, "1f1b", 32, 16, 2)),  # was global batch 8
    (["--schedule", "interleaved"], (4, 1, 2, 2, 2, "interleaved", 32, 16, 2)),  # was: vpp=1 fails
    (["--schedule", "zbv"], (4, 1, 2, 2, 2, "zbv", 32, 16, 2)),
    (["--vpp", "2"], (4, 1, 2, 2, 2, "interleaved", 32, 16, 2)),
    (["--dp", "8"], (4, 1, 2, 8, 1, "1f1b", 128, 16, 8)),  # --dp without --nodes sizes the cluster
    (["--microbatches", "8", "--pp", "4"], (4, 1, 4, 1, 1, "1f1b", 8, 8, 2)),
    (["--global-batch", "64"], (4, 1, 2, 2, 1, "1f1b", 64, 32, 2)),
    (["--microbatch-size", "2"], (4, 1, 2, 2, 1, "1f1b", 64, 16, 2)),
    (["--tp", "8", "--pp", "4"], (8, 1, 4, 1, 1, "1f1b", 16, 16, 4)),  # bigger than 2 nodes: grows
])
def test_flags_modify_the_default_job(argv, expected):
    assert plan_of(argv) == expected


def test_every_default_job_setting_is_used():
    tp, cp, pp, dp, vpp, schedule, gb, mb, nodes = plan_of([])
    assert (tp, pp, schedule, mb, nodes) == (DEFAULT_JOB["tp"], DEFAULT_JOB["pp"], DEFAULT_JOB["schedule"],
                                             DEFAULT_JOB["microbatches"], DEFAULT_JOB["nodes"])
    assert gb == mb * dp * DEFAULT_JOB["microbatch_size"]


def test_layers_without_model_modifies_the_default_model():
    from sim.cli.job_args import job_from_args
    from sim.cli.main import build_parser
    job = job_from_args(build_parser().parse_args(["simulate", "--layers", "4"]))
    assert job.model.name == "llama3-8b" and job.model.num_layers == 4


def test_library_callers_keep_the_old_defaults():
    job = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 1})
    assert (job.plan.tp, job.plan.pp, job.plan.dp) == (1, 1, 8)
    job = resolve_job({})
    assert (job.plan.tp, job.plan.pp, job.plan.global_batch) == (DEFAULTS["tp"], DEFAULTS["pp"], DEFAULTS["global_batch"])


def test_library_dimensions_without_a_model_name_what_is_missing():
    with pytest.raises(ValueError, match="missing: hidden, heads, vocab, seq_len"):
        resolve_job({"layers": 4})


def test_default_vpp_rule():
    assert [default_vpp(s) for s in ("1f1b", "gpipe", "zb-h1", "interleaved", "interleaved-zb", "zbv",
                                     "dualpipev")] == [1, 1, 1, 2, 2, 2, 2]


def test_microbatches_and_a_different_global_batch_is_one_line(capsys):
    assert main(["simulate", "--microbatches", "8", "--global-batch", "64", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "microbatches=8" in err and "--global-batch" in err


def test_default_tp_too_big_for_a_small_cluster_says_it_is_the_default(capsys):
    assert main(["simulate", "--cluster", "cpu-host", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tp=4" in err and "default job" in err


def test_describe_job_is_printed_first_and_in_json(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    small = ["--model", "small", "--nodes", "4", "--no-report"]
    assert main(["simulate", *small]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("small on 4 x dgx-h100 (32 GPUs): TP4 CP1 PP2 DP4 1f1b, 16 micro-batches of 1 per "
                     "pipeline (global batch 64), ZeRO-0")
    assert main(["simulate", *small, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["job"] == first
    assert main(["compare", "--schedules", "1f1b,gpipe", *small]) == 0
    assert capsys.readouterr().out.splitlines()[0] == first.replace(" 1f1b,", " 1f1b,gpipe,")


def test_describe_job_names_vpp():
    job = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2, "schedule": "zbv",
                       "global_batch": 8})
    assert "PP2 DP2 VPP2 zbv, 4 micro-batches of 1" in describe_job(job)


# ---- framework presets and every plan field from a job file ----

def job_of(argv):
    from sim.cli.job_args import job_from_args
    from sim.cli.main import build_parser
    return job_from_args(build_parser().parse_args(["simulate", *argv]))


def test_framework_preset_sets_the_fields_not_given():
    from schedules.frameworks import get_framework
    plan = job_of(["--model", "small", "--framework", "torchtitan", "--zero", "2"]).plan
    for field, value in get_framework("torchtitan").plan_fields().items():
        assert getattr(plan, field) == (2 if field == "zero" else value), field  # --zero given: it wins
    # the FSDP stacks shard fully unless told otherwise (torchtitan's data_parallel_shard_degree -1)
    assert job_of(["--model", "small", "--framework", "torchtitan"]).plan.zero == 3
    assert job_of(["--model", "small", "--framework", "megatron-core"]).plan.zero == 0
    explicit = job_of(["--model", "small", "--framework", "torchtitan", "--zero", "2", "--elementwise", "fused",
                       "--runtime", "megatron"]).plan
    assert (explicit.elementwise, explicit.framework, explicit.optimizer) == ("fused", "megatron", "foreach")


def test_framework_preset_and_every_recent_plan_field_from_a_job_file(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[framework]\npreset = "deepspeed"\n[model]\nmodel = "small"\n'
                    '[plan]\nzero = 3\nframework = "torch"\nelementwise = "eager"\noptimizer = "foreach"\n'
                    'selective_recompute = "alternate-matmul"\nzero3_unit = "block"\ntp_comm_overlap = true\n'
                    'sequence_parallel = true\n')
    plan = job_of(["--config", str(path)]).plan
    assert (plan.framework, plan.elementwise, plan.optimizer, plan.selective_recompute, plan.zero3_unit,
            plan.tp_comm_overlap) == ("torch", "eager", "foreach", "alternate-matmul", "block", True)
    assert plan.flash_attention is False  # from the deepspeed preset, not given explicitly


def test_runtime_from_a_job_file_is_not_dropped():  # resolve_job dropped plan.framework before
    job = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 1, "framework": "torch"})
    assert job.plan.framework == "torch"
    with pytest.raises(ValueError, match="framework='jax' is invalid"):
        resolve_job({"model": "small", "framework": "jax"})


def test_an_moe_preset_with_the_default_tp_gets_sequence_parallelism_and_expert_tp() -> None:
    # Megatron-Core's MoE layers need SP with TP; the default job's TP4 would otherwise be refused
    import argparse

    from sim.cli.job_args import add_job_arguments, job_from_args
    parser = argparse.ArgumentParser()
    add_job_arguments(parser)
    job = job_from_args(parser.parse_args(["--model", "mixtral-8x7b"]))
    assert job.plan.tp == 4 and job.plan.sequence_parallel
    assert job.plan.etp == 4  # Megatron-Core's default expert TP is the TP degree
    assert job_from_args(parser.parse_args(["--model", "mixtral-8x7b", "--etp", "1"])).plan.etp == 1
    dense = job_from_args(parser.parse_args(["--model", "llama3-8b"]))
    assert not dense.plan.sequence_parallel
