"""The trainsim CLI: default run, JSON determinism, and one-line errors with exit code 2."""

import json

import pytest

from core.settings import declared
from schedules.plan import CONCERNS
from sim.cli.main import main

SMALL = ["--model", "small", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "2", "--pp", "2",
         "--global-batch", "8", "--no-report"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_simulate_default_writes_report(capsys, in_tmp):
    code, out, _ = run(capsys, "simulate")
    assert code == 0
    assert "step_time_s" in out and "bubble_fraction" in out
    html = (in_tmp / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "plotly" in html.lower()


def test_simulate_json_keys_and_determinism(capsys):
    code, first, _ = run(capsys, "simulate", *SMALL, "--json")
    assert code == 0
    _, second, _ = run(capsys, "simulate", *SMALL, "--json")
    assert first == second  # byte-identical
    obj = json.loads(first)
    for key in ("world_size", "num_params", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
                "bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction", "peak_memory_gib",
                "fits", "memory_gib", "cost_per_step_usd", "config"):
        assert key in obj
    assert set(obj["memory_gib"]) == {"params", "grads", "optimizer", "activations", "buffers"}
    assert obj["world_size"] == 8 and obj["config"]["plan"]["dp"] == 2
    declared_order = [d.name for concern in CONCERNS for d in declared(concern)]
    assert list(obj["config"]["plan"]) == [*declared_order, "num_microbatches"]  # one concern after another


def test_config_file_and_flag_override(capsys, in_tmp):
    (in_tmp / "job.toml").write_text('[model]\nmodel = "small"\n[plan]\ntp = 2\npp = 2\nglobal_batch = 8\n'
                                     '[cluster]\ncluster = "dgx-h100"\nnodes = 1\n')
    code, out, _ = run(capsys, "simulate", "--config", "job.toml", "--json", "--no-report", "--pp", "4")
    assert code == 0
    plan = json.loads(out)["config"]["plan"]
    assert (plan["tp"], plan["pp"], plan["dp"]) == (2, 4, 1)


def test_model_by_dimensions(capsys):
    code, out, _ = run(capsys, "simulate", "--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "2",
                       "--ffn-hidden", "1024", "--ffn-kind", "swiglu", "--vocab", "1000", "--seq-len", "128",
                       "--cluster", "dgx-h100", "--nodes", "1", "--tp", "8", "--pp", "1", "--global-batch", "4", "--json",
                       "--no-report")
    assert code == 0
    assert json.loads(out)["config"]["model"]["num_kv_heads"] == 2
    assert json.loads(out)["config"]["model"]["name"] == "custom"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--model", "gpt-9"], "valid: "),
    (["--cluster", "dgx-z100"], "valid: "),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "3"], "tp="),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "8", "--pp", "2"], "tp="),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1", "--pp", "2", "--dp", "1", "--tp", "2",
      "--global-batch", "8"], "dp="),  # tp*pp*dp = 4 != 8 GPUs
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--pp", "3", "--dp", "1", "--tp", "8"], "pp="),  # 32 % 3
    (["--model", "llama3-8b", "--tp", "8", "--pp", "2", "--dp", "1", "--global-batch", "8", "--vpp", "3",
      "--schedule", "interleaved"], "pp="),
    (["--model", "llama3-8b", "--tp", "8", "--dp", "3", "--global-batch", "8"], "global_batch="),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "3", "--tp", "3", "--pp", "1", "--dp", "8"],
     "tp="),  # 32 heads
    (["--schedule", "2f2b"], "--schedule: invalid choice: '2f2b'"),  # a closed vocabulary: argparse lists it
])
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code, out, err = run(capsys, "simulate", *argv, "--no-report")
    assert code == 2
    assert err.count("\n") == 1 and needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--zero", "5"], ["--offload", "gpu"], ["--recompute", "some"],
                                  ["--tp", "two"], ["--no-such-flag"]])
def test_bad_flag_value_exits_2_with_one_line(capsys, argv):
    assert main(["simulate", *argv, "--no-report"]) == 2  # argparse's exit code is returned, not raised
    err = capsys.readouterr().err
    # unknown flags are reported by the top-level parser ("trainsim: error: unrecognized arguments")
    assert err.count("\n") == 1 and err.startswith("trainsim") and ": error: " in err and "usage:" not in err


def test_bad_config_file_key(capsys, in_tmp):
    (in_tmp / "job.toml").write_text("[plan]\ntpp = 2\n")
    code, _, err = run(capsys, "simulate", "--config", "job.toml")
    assert code == 2 and "plan.tpp" in err and err.count("\n") == 1
    assert not (in_tmp / "report.html").exists()


@pytest.mark.parametrize(("text", "needle"), [("[plan]\ntpp = 2\n", "plan.tpp"), ("[plan\n", "not valid TOML"),
                                              (None, "cannot read")])
def test_bad_config_file_errors_name_the_file(capsys, in_tmp, text, needle):
    if text is not None:
        (in_tmp / "job.toml").write_text(text)
    code, _, err = run(capsys, "simulate", "--config", "job.toml")
    assert code == 2 and err.count("\n") == 1 and "job.toml: " in err and needle in err


def test_plan_that_does_not_fit_still_simulates(capsys):
    code, out, _ = run(capsys, "simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "1",
                       "--tp", "8", "--pp", "1", "--global-batch", "4", "--json", "--no-report")
    assert code == 0
    obj = json.loads(out)
    assert obj["fits"] is False
    assert obj["memory_gib"]["optimizer"] > 80  # 12 bytes x 70.6B / 8 GPUs ~ 99 GiB
    assert obj["step_time_s"] > 0


def test_schedule_playground_json(capsys, in_tmp):
    code, out, _ = run(capsys, "schedule", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--json")
    assert code == 0
    obj = json.loads(out)
    assert obj["bubble_fraction"] == pytest.approx(3 / 11)
    assert obj["orders"][3][:4] == ["F0", "B0", "F1", "B1"]
    assert not (in_tmp / "schedule.html").exists()  # --json writes no report unless --report is given
    _, out, _ = run(capsys, "schedule", "--schedule", "interleaved", "--pp", "2", "--microbatches", "4", "--json",
                    "--no-report")
    assert json.loads(out)["orders"][0][0] == "F0c0"


def test_compare_json_lists_each_schedule(capsys, in_tmp):
    code, out, _ = run(capsys, "compare", "--schedules", "gpipe,1f1b,interleaved,zb-h1", *SMALL[:-1], "--json")
    assert code == 0
    objs = json.loads(out)
    assert [o["config"]["plan"]["schedule"] for o in objs] == ["gpipe", "1f1b", "interleaved", "zb-h1"]
    assert not (in_tmp / "compare.html").exists()  # --json writes no report unless --report is given


def test_presets_lists_everything(capsys):
    code, out, _ = run(capsys, "presets", "--json")
    obj = json.loads(out)
    assert code == 0
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "aws-p4d", "aws-p5", "gcp-a3", "pcie-4090",
            "cpu-host"} <= {c["cluster"] for c in obj["clusters"]}
    assert {"llama3-405b", "gpt3-175b", "nanogpt-124m", "tiny"} <= {m["model"] for m in obj["models"]}


def test_schedule_vpp_1_is_what_one_chunk_schedules_run(capsys):
    """--vpp 1 with only one-chunk schedules is their own setting, not an error; a larger vpp still
    names the schedules that take chunks."""
    code, out, err = run(capsys, "schedule", "--schedule", "zb-h1,1f1b", "--pp", "4", "--microbatches", "8", "--vpp", "1",
                         "--json", "--no-report")
    assert code == 0 and [s["vpp"] for s in json.loads(out)] == [1, 1]
    code, _, err = run(capsys, "schedule", "--schedule", "zb-h1", "--vpp", "2", "--no-report")
    assert code == 2 and "none of zb-h1 takes chunks" in err
