"""``trainsim simulate --tokens --reliability``: the run object, determinism, unchanged default
output, and one-line exit-2 errors for bad reliability inputs."""

import json

import pytest

from sim.cli.main import main

SMALL = ["simulate", "--model", "small", "--cluster", "dgx-h100", "--nodes", "2", "--tp", "2", "--pp", "2",
         "--global-batch", "16", "--microbatch-size", "1", "--no-report", "--json"]
RUN_KEYS = ("ettr", "interruptions", "mtti_h", "checkpoint_interval_s", "days_p10", "days_p50", "days_p90",
            "gpu_hours", "energy_mwh", "cost_usd", "breakdown")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_object_keys_and_byte_identical(capsys):
    code, first, _ = run(capsys, *SMALL, "--tokens", "1e9", "--reliability", "meta-rsc1")
    assert code == 0
    _, second, _ = run(capsys, *SMALL, "--tokens", "1e9", "--reliability", "meta-rsc1")
    assert first == second
    obj = json.loads(first)["run"]
    for key in RUN_KEYS:
        assert key in obj
    assert obj["days_p10"] <= obj["days_p50"] <= obj["days_p90"]
    assert 0 < obj["ettr"] <= 1 and obj["energy_mwh"] > 0 and obj["cost_usd"] > 0


def test_default_output_has_no_run_object(capsys):
    _, out, _ = run(capsys, *SMALL)
    assert "run" not in json.loads(out)


def test_reliability_file_and_seed(capsys, in_tmp):
    (in_tmp / "r.toml").write_text('[reliability]\npreset = "meta-rsc1"\nseed = 3\nspare_nodes = 1\n'
                                   '[reliability.classes.gpu]\nper_1000_node_days = 5000.0\nrepair_s = 3600\n'
                                   '[reliability.checkpoint]\nmode = "async"\ninterval_s = "auto"\n')
    code, out, err = run(capsys, *SMALL, "--tokens", "1e10", "--reliability", "r.toml")
    assert code == 0, err
    obj = json.loads(out)["run"]
    assert obj["monte_carlo"]["seed"] == 3 and obj["checkpoint_mode"] == "async" and obj["spare_nodes"] == 1
    assert obj["interruptions"] > 1 and obj["breakdown"]["repair_wait"] > 0


def test_job_file_reliability_table_is_used(capsys, in_tmp):
    (in_tmp / "job.toml").write_text('[model]\nmodel = "small"\n[reliability]\npreset = "opt-175b"\n')
    code, out, err = run(capsys, "simulate", "--config", "job.toml", "--nodes", "2", "--tp", "2", "--pp", "2",
                         "--global-batch", "16", "--no-report", "--json", "--tokens", "1e9")
    assert code == 0, err
    assert json.loads(out)["run"]["reliability"] == "opt-175b"


@pytest.mark.parametrize("table,needle", [
    ('[reliability.classes.gpu]\nper_1000_node_days = -1.0\n', "classes.gpu.per_1000_node_days"),
    ('[reliability.classes.cosmic]\nper_1000_node_days = 1.0\n', "unknown failure class"),
    ('[reliability.storage]\ncapacity_bytes = 1000.0\n', "storage.capacity_bytes"),
    ('[reliability.checkpoint]\nmode = "sometimes"\n', "checkpoint.mode"),
    ('[reliability]\nflux = 1\n', "unknown key"),
    ('[reliability.classes.nvlink]\nper_1000_node_days = 1.0\nkills_job = false\nslowdown = 0.5\n',
     "classes.nvlink.slowdown"),
    ('[reliability.classes.gpu]\nper_1000_node_days = 1.0\nslowdown = 2.0\n', "kills_job = false"),
    ('[reliability.classes.nvlink]\nper_1000_node_days = 1e9\nkills_job = false\nslowdown = 2.0\n'
     'detect_s = 3600\n', "never finishes"),
])
def test_bad_reliability_inputs_are_one_line_exit_2(capsys, in_tmp, table, needle):
    body = table if table.startswith("[reliability]") else "[reliability]\n" + table
    (in_tmp / "bad.toml").write_text(body)
    code, out, err = run(capsys, *SMALL, "--tokens", "1e9", "--reliability", "bad.toml")
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("rate,tokens,samples,needle", [
    ("1e12", "1e9", 2000, "expects inf interruptions (more than 100,000)"),  # was an OverflowError (math.expm1)
    ("1e8", "1e10", 2000, "e+05 interruptions (more than 100,000)"),  # the count follows the step time
    ("1e7", "1e10", 100000, "reliability.samples=100000 is invalid"),  # 4e8 draws: minutes, no progress shown
])
def test_a_run_interrupted_beyond_reason_is_one_line_exit_2(capsys, in_tmp, rate, tokens, samples, needle):
    (in_tmp / "r.toml").write_text(f"[reliability]\nsamples = {samples}\n[reliability.classes.gpu]\n"
                                   f"per_1000_node_days = {rate}\n")
    code, out, err = run(capsys, *SMALL, "--tokens", tokens, "--reliability", "r.toml")
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_a_high_rate_below_the_limits_still_runs(capsys, in_tmp):
    (in_tmp / "r.toml").write_text("[reliability]\n[reliability.classes.gpu]\nper_1000_node_days = 1e7\n")
    code, out, err = run(capsys, *SMALL, "--tokens", "1e10", "--reliability", "r.toml")
    assert code == 0, err
    obj = json.loads(out)["run"]
    assert 1000 < obj["interruptions"] < 100_000 and 0 < obj["ettr"] < 1


@pytest.mark.parametrize("extra,needle", [(["--reliability", "meta-rsc9", "--tokens", "1e9"], "meta-rsc1"),
                                          (["--reliability", "meta-rsc1"], "needs --tokens"),
                                          (["--tokens", "-5"], "tokens=-5")])
def test_bad_run_flags_are_one_line_exit_2(capsys, extra, needle):
    code, out, err = run(capsys, *SMALL, *extra)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_readme_reliability_files_load():
    from pathlib import Path

    from sim.run.reliability_file import load_reliability

    root = Path(__file__).resolve().parents[3] / "docs" / "reliability"
    spares = load_reliability(root / "llama3-async-spares.toml")
    repair = load_reliability(root / "llama3-async-repair.toml")
    assert spares.spare_nodes == 16 and repair.spare_nodes == 0
    assert spares.checkpoint.mode.value == "async" and {c.repair_s for c in repair.killing() if c.needs_node} == {14400}
