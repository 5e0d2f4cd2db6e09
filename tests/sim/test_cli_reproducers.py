"""Every command-line and job-file reproducer of issue 15, and the defaults cases of issue 16, as
their issues give them: each now exits 0 with sane numbers or 2 with one line naming the field,
the value and what is valid. (The engine's long-step reproducers are in test_fluid_long_time.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sim.cli.main import main

LONG = "x" * 300


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(capsys, *argv: str) -> str:
    """Run ``argv``; it must exit 2 with one line on stderr, no traceback, in well under a minute."""
    t0 = time.process_time()
    code, _, err = run(capsys, *argv)
    assert code == 2, (argv, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert time.process_time() - t0 < 30
    return err


# ---- issue 15: CLI and job files ----

@pytest.mark.parametrize("flag", ["--tp", "--pp", "--cp"])
def test_zero_degree_is_one_line(capsys, flag):  # was ZeroDivisionError
    err = one_line_error(capsys, "simulate", flag, "0", "--no-report")
    assert f"{flag[2:]}=0 is invalid" in err and "integer" in err


@pytest.mark.parametrize("argv", [["--layers", "4"], ["--seq-len", "4096"]])
def test_dimensions_without_a_model_modify_the_default_model(capsys, argv):  # was TypeError: ModelSpec missing
    code, out, _ = run(capsys, "simulate", *argv, "--json", "--no-report")
    assert code == 0
    model = json.loads(out)["config"]["model"]
    assert model["name"] == "llama3-8b" and model[{"--layers": "num_layers", "--seq-len": "seq_len"}[argv[0]]] \
        == int(argv[1])


def test_300_character_cluster_name_is_one_line(capsys):  # was ENAMETOOLONG
    err = one_line_error(capsys, "simulate", "--cluster", LONG, "--no-report")
    assert "cluster=" in err and "255" in err and len(err) < 300


@pytest.mark.parametrize("flag", ["--report", "--chrome-trace"])
def test_300_character_output_path_is_refused_before_simulating(capsys, in_tmp, flag):
    err = one_line_error(capsys, "simulate", "--model", "small", flag, LONG + ".html")
    assert flag in err and len(err) < 300
    assert not list(in_tmp.iterdir())


def test_explore_huge_microbatch_size_is_one_line(capsys, in_tmp):  # was an orjson overflow
    one_line_error(capsys, "explore", "--model", "small", "--cluster", "dgx-h100", "--gpus", "8",
                   "--microbatch-sizes", "1e30", "--out", str(in_tmp / "s"), "--no-report")


@pytest.mark.parametrize(("flag", "value"), [("--fwd", "nan"), ("--bwd", "inf"), ("--fwd", "0"), ("--bwd", "-1"),
                                             ("--p2p", "nan")])
def test_schedule_times_must_be_finite(capsys, flag, value):  # nan ran as 0, inf printed null metrics
    err = one_line_error(capsys, "schedule", flag, value, "--json")
    assert flag in err and value in err


@pytest.mark.parametrize("argv", [["schedule", "--pp", "1000000"], ["schedule", "--microbatches", "100000000"],
                                  ["simulate", "--global-batch", "100000000"], ["simulate", "--steps", "100000000"],
                                  ["simulate", "--steps", "1000000"], ["compare", "--global-batch", "100000000"]])
def test_huge_runs_are_refused_at_once(capsys, argv):  # ran for minutes into gigabytes
    err = one_line_error(capsys, *argv, "--no-report")
    assert "too large" in err or "is invalid" in err


def test_explore_huge_global_batch_is_pruned(capsys, in_tmp):  # grew to 22 GB
    err = one_line_error(capsys, "explore", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                         "--global-batch", "100000000", "--schedules", "gpipe,1f1b", "--out", str(in_tmp / "s"),
                         "--no-report", "--workers", "1")
    assert "too large to evaluate" in err


@pytest.mark.parametrize(("text", "needles"), [
    ("[plan]\ntp = [1, 2]\n", ["plan.tp=[1, 2]", "integer"]),
    ("[plan]\npp = inf\n", ["plan.pp=inf", "integer"]),
    ("[model]\nlayers = 1000000000\n", ["model.layers=1000000000", "100000"]),
    ("[plan]\ntp = " + "[" * 3000 + "]" * 3000 + "\n", ["nested too deeply"]),
    ("[plan]\ntp = 'four'\n", ["plan.tp='four'", "integer"]),  # issue 16: was "invalid literal for int()"
    ("[plan]\nsequence_parallel = \"no\"\n", ["plan.sequence_parallel='no'", "boolean"]),  # issue 16: counted true
    ("[sim]\nfull = \"false\"\n", ["sim.full='false'", "boolean"]),  # issue 16: ran unfolded
    ("[plan]\nframework = 3\n", ["plan.framework=3", "megatron"]),
    ("[framework]\npreset = \"jax\"\n", ["framework.preset='jax'", "fsdp2"]),
])
def test_bad_job_files_name_file_key_and_value(capsys, in_tmp, text, needles):
    (in_tmp / "job.toml").write_text(text)
    err = one_line_error(capsys, "simulate", "--config", "job.toml", "--no-report")
    assert "job.toml: " in err and all(n in err for n in needles), err


def test_non_utf8_and_huge_job_files(capsys, in_tmp):
    (in_tmp / "bin.toml").write_bytes(b"[plan]\ntp = \xff\n")
    assert "not UTF-8" in one_line_error(capsys, "simulate", "--config", "bin.toml", "--no-report")
    (in_tmp / "big.toml").write_text("# padding\n" * 200_000)
    assert "larger than" in one_line_error(capsys, "simulate", "--config", "big.toml", "--no-report")


BLOCK_TORCH = "import sys; sys.modules['torch'] = None; from sim.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("argv", [["profile", "--out", "rec"], ["calibrate", "--microbench"]])
@pytest.mark.slow  # a subprocess each
def test_torch_commands_without_torch_say_what_to_install(in_tmp, argv):
    out = subprocess.run([sys.executable, "-c", BLOCK_TORCH, *argv], cwd=in_tmp, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "pip install 'trainsim[torch]'" in out.stderr


def test_a_bug_is_one_line_exit_1_and_v_shows_the_traceback(capsys, monkeypatch):
    import sim.cli.cmd_simulate as cmd

    def broken(job):
        raise KeyError("boom")
    monkeypatch.setattr(cmd, "simulate", broken)
    code, _, err = run(capsys, "simulate", "--no-report")
    assert code == 1 and err.count("\n") == 1 and "internal error" in err and "KeyError" in err
    code, _, err = run(capsys, "-v", "simulate", "--no-report")
    assert code == 1 and "Traceback" in err


# ---- issue 16: defaults that compose ----

def plan(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, "simulate", *argv, "--json", "--no-report")
    assert code == 0, err
    return json.loads(out)["config"]["plan"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--zero", "1"], (4, 2, 2, 32)),  # ran TP1 PP1 DP16
    (["--nodes", "4"], (4, 2, 4, 64)),  # ran TP1 DP32 with global batch 64
    (["--tp", "4", "--pp", "2"], (4, 2, 2, 32)),  # used global batch 8
])
def test_flags_modify_the_default_job(capsys, argv, expected):
    p = plan(capsys, *argv)
    assert (p["tp"], p["pp"], p["dp"], p["global_batch"]) == expected and p["num_microbatches"] == 16


def test_interleaved_defaults_to_two_chunks(capsys):  # failed: vpp defaulted to 1
    p = plan(capsys, "--schedule", "interleaved")
    assert (p["schedule"], p["vpp"]) == ("interleaved", 2)


def test_pp_3_error_blames_pp(capsys):  # blamed tp=1
    err = one_line_error(capsys, "simulate", "--pp", "3", "--no-report")
    assert err.split("error: ")[1].startswith("pp=3 is invalid") and "default job" in err


def test_compare_microbatches(capsys):
    code, out, _ = run(capsys, "compare", "--model", "small", "--schedules", "1f1b,interleaved", "--pp", "4",
                       "--microbatches", "8", "--json", "--no-report")
    assert code == 0
    assert [o["config"]["plan"]["num_microbatches"] for o in json.loads(out)] == [8, 8]


def test_recompute_help_says_what_each_mode_recomputes(capsys):
    assert main(["simulate", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "full keeps each layer's input" in text and "nothing with flash attention" in text


@pytest.mark.parametrize(("argv", "start"), [(["--hidden", "100"], "hidden=100 is invalid"),
                                             (["--kv-heads", "5"], "kv_heads=5 is invalid")])
def test_model_errors_name_the_setting_as_given(capsys, argv, start):
    err = one_line_error(capsys, "simulate", *argv, "--no-report")
    assert err.split("error: ")[1].startswith(start)
