"""``trainsim replay`` and ``trainsim critical-path`` from the command line: JSON keys and
determinism, the report, and one-line errors (exit 2) for bad knobs and unmatched collectives."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from sim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
PP2 = str(REPO / "traces" / "pp2-zbv")
DP4 = REPO / "traces" / "dp4-zero3"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_replay_json_is_stable_and_reports_fidelity(capsys: pytest.CaptureFixture[str]) -> None:
    code, first, _ = run_cli(capsys, "replay", PP2, "--scale", "rank1=2", "--json")
    assert code == 0
    code, second, _ = run_cli(capsys, "replay", PP2, "--scale", "rank1=2", "--json")
    assert first == second  # byte-identical
    s = json.loads(first)
    for key in ("run", "world_size", "knobs", "metrics", "max_abs_error_pct", "ranks", "matching", "notes"):
        assert key in s
    assert s["knobs"] == ["--scale rank1=2"]
    assert s["max_abs_error_pct"] < 3.0
    assert set(s["metrics"]) == {"measured", "replayed", "whatif"}
    assert all(r["whatif_s"] > r["replayed_s"] for r in s["ranks"])  # a slower stage slows the pipeline
    assert s["matching"]["p2p_pairs"] == 16 and s["matching"]["unmatched_spans"] == 0


@pytest.mark.slow
def test_replay_report_has_the_timelines_and_the_critical_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "whatif.html"
    code, out, _ = run_cli(capsys, "replay", PP2, "--scale", "compute=0.5", "--report", str(report))
    assert code == 0 and "step time per rank" in out
    html = report.read_text()
    assert "Critical path" in html and "what-if: --scale compute=0.5" in html and "replayed (unchanged)" in html


@pytest.mark.slow
def test_critical_path_json_shares_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "critical-path", PP2, "--json", "--top", "3")
    assert code == 0
    s = json.loads(out)
    assert sum(s["shares"].values()) == pytest.approx(1.0, abs=1e-6)
    assert sum(s["seconds"].values()) == pytest.approx(s["step_time_s"], rel=1e-6)
    assert len(s["longest"]) == 3


@pytest.mark.parametrize("argv", [
    ["--scale", "gpu=2"], ["--link", "nvlink:bandwidth=2x"], ["--drop", "everything"],
    pytest.param(["--scale", "rank7=2"], marks=pytest.mark.slow), ["--remove-straggler", "slowest"],
])
def test_bad_knobs_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run_cli(capsys, "replay", PP2, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("trainsim replay: error:")


def shifted_copy(src: Path, dst: Path, rank: int, shift_us: float) -> Path:
    """A copy of a run whose ``rank`` trace is moved ``shift_us`` later (a different recording)."""
    shutil.copytree(src, dst)
    path = dst / f"rank{rank}.json.gz"
    trace = json.loads(gzip.decompress(path.read_bytes()))
    for e in trace["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += shift_us
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return dst


@pytest.mark.slow
def test_unmatchable_collectives_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = shifted_copy(DP4, tmp_path / "mixed", rank=3, shift_us=10e6)
    code, _, err = run_cli(capsys, "replay", str(run))
    assert code == 2 and err.count("\n") == 1
    assert "collectives cannot be matched across ranks" in err and "--allow-partial" in err
    code, out, _ = run_cli(capsys, "replay", str(run), "--allow-partial", "--json")
    assert code == 0
    s = json.loads(out)
    assert s["matching"]["unmatched_spans"] > 0
    assert any("found no peer" in n for n in s["notes"])
