"""`trainsim validate --published`: reading the file, the error arithmetic, the JSON object and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.output import json_object
from profiler.validate.published.rows import (
    DENSE_FILE,
    FORMAT_FILE,
    PublishedRow,
    default_file,
    read_rows,
)
from profiler.validate.published.run import RowResult, SimulatedStep, validate_row
from profiler.validate.published.summary import summarize
from sim.cli.main import main

MINIMAL = """[[run]]
name = "{name}"
source_group = "{family}"
gpu = "A100 80GB"
gpus = 8
framework = "Megatron-LM / Megatron-Core r0.8.0"
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
microbatch_size = 1
global_batch = 16
measured_step_s = {measured}
"""
REQUIRED_RUN_KEYS = {"name", "measured_step_s", "sim_step_s", "step_err", "measured_peak_memory_gib",
                     "sim_peak_memory_gib", "memory_err", "skipped"}


def write_rows(tmp_path: Path, specs: list[tuple[str, str, float]]) -> Path:
    path = tmp_path / "runs.toml"
    path.write_text("".join(MINIMAL.format(name=n, family=f, measured=m) for n, f, m in specs))
    return path


def fake_results(tmp_path: Path, specs: list[tuple[str, str, float, float]]) -> list[RowResult]:
    """Rows with a chosen simulated step (no simulation): (name, family, measured_s, simulated_s)."""
    rows = read_rows(write_rows(tmp_path, [(n, f, m) for n, f, m, _ in specs]))
    return [RowResult(row=row, row_job=job_for_row(row), sim=SimulatedStep(step_s=s, peak_memory_bytes=2**30, reserved_memory_bytes=2**30,
                                                                         fits_hbm=True, wall_s=0.0))
            for row, (_, _, _, s) in zip(rows, specs, strict=True)]


def test_rows_read_typed_and_unstated_keys_are_none(tmp_path: Path) -> None:
    row = read_rows(write_rows(tmp_path, [("a", "g", 1.5)]))[0]
    assert isinstance(row, PublishedRow)
    assert (row.name, row.gpus, row.measured_step_s, row.cp, row.kv_heads, row.network) == ("a", 8, 1.5, 1, None, None)
    assert row.family == "g"


@pytest.mark.parametrize(("edit", "message"), [
    (("gpus = 8", "gpus = 0"), "run 1 (a): gpus=0 is invalid: expected an integer in [1, 1000000]"),
    (("gpus = 8", f"gpus = {10**29}"), f"run 1 (a): gpus={10**29} is invalid: expected an integer in [1, 1000000]"),
    (("layers = 4", f"layers = {10**29}"), f"run 1 (a): layers={10**29} is invalid: expected an integer in [1, 100000]"),
    (("ffn_hidden = 4096", f"ffn_hidden = {10**29}"),
     f"run 1 (a): ffn_hidden={10**29} is invalid: expected an integer in [1, 16777216]"),
    (("tp = 1", "tp = 1.0"), "run 1 (a): tp=1.0 is invalid: expected an integer in [1, 65536]"),
    (("measured_step_s = 1.5", "measured_step_s = inf"), "run 1 (a): measured_step_s=inf is invalid: expected a number in (0, 1e+09]"),
    (("measured_step_s = 1.5", "measured_step_s = nan"), "run 1 (a): measured_step_s=nan is invalid: expected a number in (0, 1e+09]"),
    (("gpu = ", "gpu = 3 #"), "run 1 (a): gpu=3 is invalid: expected a text"),
    (("gpus = 8\n", ""), "run 1 (a): gpus=None is invalid: a required key is missing"),
    (("zero = 1", "zero = 4"), "run 1 (a): zero=4 is invalid: expected one of 0, 1, 2, 3"),
    (("measured_step_s = 1.5", 'measured_step_s = "fast"'), "run 1 (a): measured_step_s='fast' is invalid: expected a number in (0, 1e+09]"),
    (("[[run]]", "run = 3\n#"), "run=3 is invalid: expected one or more [[run]] tables"),
])
def test_bad_rows_are_one_line_errors(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = write_rows(tmp_path, [("a", "g", 1.5)])
    path.write_text(path.read_text().replace(*edit, 1))
    with pytest.raises(ValueError) as info:
        read_rows(path)
    assert str(info.value) == f"{path}: {message}"


def test_unknown_keys_are_named_with_the_valid_ones(tmp_path: Path) -> None:
    """A misspelt key is an error (it was ignored: the row then ran without its measurement)."""
    path = write_rows(tmp_path, [("a", "g", 1.5)])
    path.write_text(path.read_text() + "measured_stepp = 3\n")
    with pytest.raises(ValueError) as info:
        read_rows(path)
    text = str(info.value)
    assert text.startswith(f"{path}: run 1 (a): measured_stepp=3 is invalid: unknown key; did you mean measured_step_s? valid: ")
    assert "\n" not in text and "measured_mfu" in text and "published" in text
    path.write_text("title = 'x'\n" + path.read_text().replace("measured_stepp = 3\n", ""))
    with pytest.raises(ValueError, match="title='x' is invalid: a published-runs file holds only"):
        read_rows(path)


def test_documentation_keys_are_accepted_and_checked(tmp_path: Path) -> None:
    path = write_rows(tmp_path, [("a", "g", 1.5)])
    docs = 'model = "M"\npublished = "p"\nnot_stated = ["x", "y"]\nmeasured_hfu = 0.4\ntokens_basis = "derived"\n'
    path.write_text(path.read_text() + docs)
    assert read_rows(path)[0].measured_step_s == 1.5
    path.write_text(path.read_text().replace("measured_hfu = 0.4", 'measured_hfu = "high"'))
    with pytest.raises(ValueError, match="measured_hfu='high' is invalid: expected a number in"):
        read_rows(path)


@pytest.mark.parametrize("key", ["gpus", "layers", "ffn_hidden"])
def test_huge_row_values_end_in_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    """Issue 28: a 30-digit gpus/layers/ffn_hidden was an internal error, an OverflowError or a 1e26 s step."""
    path = write_rows(tmp_path, [("a", "g", 1.5)])
    text = path.read_text()
    path.write_text("\n".join(f"{key} = {10**29}" if line.startswith(f"{key} = ") else line for line in text.splitlines()))
    assert main(["validate", "--published", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"{key}={10**29} is invalid" in err


def test_duplicate_names_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name='a' is invalid: run names must be unique"):
        read_rows(write_rows(tmp_path, [("a", "g", 1.0), ("a", "g", 2.0)]))


def test_the_default_file_is_the_repositorys_dense_calibration_set() -> None:
    """No file outside the repository is needed: the default is the in-repo dense set (38+ rows)."""
    assert default_file() == DENSE_FILE
    rows = read_rows(DENSE_FILE)
    assert len(rows) >= 38 and all(r.source for r in rows)
    docs = read_rows(FORMAT_FILE)
    assert 2 <= len(docs) <= 3 and all(r.source for r in docs)


def test_mape_and_worst_by_hand(tmp_path: Path) -> None:
    results = fake_results(tmp_path, [("a", "x", 10.0, 12.0), ("b", "x", 4.0, 3.0), ("c", "y", 2.0, 2.1)])
    s = summarize(results)
    # errors: +0.2, -0.25, +0.05 -> MAPE 0.5 / 3, mean 0, worst b (|-0.25|)
    assert s.step is not None and s.worst is not None
    assert s.step.mape == pytest.approx(0.5 / 3) and s.step.mean_err == pytest.approx(0.0)
    assert s.worst == ("b", pytest.approx(-0.25))
    assert s.families["x"].mape == pytest.approx(0.225) and s.families["y"].mean_err == pytest.approx(0.05)
    obj = json_object(results, s, "runs.toml")
    assert obj["mape"] == pytest.approx(0.166667) and obj["worst"] == {"name": "b", "step_err": -0.25}
    assert [r["step_err"] for r in obj["runs"]] == [pytest.approx(0.2), -0.25, pytest.approx(0.05)]


def test_json_run_keys_and_skipped_rows(tmp_path: Path) -> None:
    results = fake_results(tmp_path, [("a", "x", 10.0, 12.0)])
    unexpressible = RowResult(row=results[0].row, reason="async TP: no plan knob")
    obj = json_object([*results, unexpressible], summarize([*results, unexpressible]), "runs.toml")
    assert list(obj)[:3] == ["runs", "mape", "worst"]
    for run in obj["runs"]:
        assert REQUIRED_RUN_KEYS <= set(run) and "sim_wall_s" not in run
    skipped = obj["runs"][1]
    assert skipped["skipped"] and skipped["reason"] == "async TP: no plan knob" and skipped["sim_step_s"] is None
    assert (obj["rows"], obj["expressed"], obj["skipped"]) == (2, 1, 1)
    assert "sim_wall_s" in json_object(results, summarize(results), "runs.toml", timings=True)["runs"][0]


def test_mfu_is_the_megatron_model_flops_formula(tmp_path: Path) -> None:
    """MFU at a step time = 72 B s L h^2 (1 + s/6h + V/12Lh) / (t x GPUs x peak) (Narayanan et al.
    2021, eq. 3: GPT with a 4h GeLU MLP), the simulator's definition."""
    r = fake_results(tmp_path, [("a", "x", 1.0, 0.5)])[0]
    b, s, layers, h, v = 16, 2048, 4, 1024, 51200
    flops = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h))
    expected = flops / (1.0 * 8 * 312e12)
    assert r.mfu(1.0) == pytest.approx(expected)
    assert r.mfu(0.5) == pytest.approx(2 * expected)
    assert r.sim_tokens_per_s_per_gpu == pytest.approx(b * s / (0.5 * 8))


@pytest.mark.slow  # runs validate --published twice
def test_cli_json_is_byte_identical(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        assert main(["validate", "--published", str(FORMAT_FILE), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    obj = json.loads(outputs[0])
    assert len(obj["runs"]) == len(read_rows(FORMAT_FILE)) and obj["expressed"] + obj["skipped"] == obj["rows"]


def test_cli_table_lists_rows_skips_and_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hsdp = MINIMAL.format(name="hsdp-row", family="g", measured=1.0).replace(
        "zero = 1", 'zero = 3\nzero_note = "hybrid (HSDP)"')
    path = tmp_path / "runs.toml"
    path.write_text(FORMAT_FILE.read_text() + "\n" + hsdp)
    assert main(["validate", "--published", str(path), "--report", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert all(r.name in out for r in read_rows(FORMAT_FILE))
    assert "skipped hsdp-row: hybrid sharding without its shard group stated" in out
    assert "3/4 rows simulated, 1 skipped" in out and "MAPE" in out and (tmp_path / "r.html").is_file()


@pytest.mark.parametrize(("argv", "message"), [
    (["--published", "--suite"], "--published does not combine with --suite"),
    (["--published", "/no/such/file.toml"], "/no/such/file.toml: cannot read"),
])
def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow  # a subprocess
def test_published_validation_needs_no_torch(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['torch'] = None; from sim.cli.main import main; "
            f"sys.exit(main(['validate', '--published', {str(FORMAT_FILE)!r}, '--json']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == len(read_rows(FORMAT_FILE))


def test_a_row_too_large_for_this_machine_is_a_counted_skip(tmp_path: Path) -> None:
    """The size guard simulate uses: a billion-sequence batch is skipped with the reason, not run for minutes."""
    path = write_rows(tmp_path, [("a", "g", 1.5)])
    path.write_text(path.read_text().replace("global_batch = 16", "global_batch = 1000000000"))
    result = validate_row(read_rows(path)[0])
    assert result.skipped and "too large for this machine" in (result.reason or "")
