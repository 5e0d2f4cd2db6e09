"""Where a launch records (staging beside --out, promoted only on success), the refusal of a
foreign --out, stale staging directories, temp files of a rank killed mid-export, the first
failing rank's attribution, and the one-line error when torch is missing. No torch needed."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.launch import ProfileRun
from profiler.launch_dirs import (
    FAILED_MARK,
    check_out,
    clean_stale,
    failed_path,
    keep_failed,
    promote,
    staging_path,
)
from profiler.launch_failures import ErrorRecord, TorchrunReport, describe_exit, first_failure
from profiler.trainer.files import remove_temp_files, write_json
from sim.atomic import temp_path
from sim.cli.main import main


def fingerprint(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def recording(directory: Path, tag: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "rank0.json.gz").write_bytes(tag.encode() * 10)
    (directory / "manifest.json").write_text(f'{{"tag": "{tag}"}}')
    (directory / "launch.log").write_text(tag)
    return directory


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_staging_is_hidden_beside_out_and_promotion_replaces_out(tmp_path: Path) -> None:
    out = recording(tmp_path / "run", "old")
    staging = staging_path(out)
    assert staging.parent == tmp_path and staging.name.startswith(f".run.partial-{os.getpid()}-")
    recording(staging, "new")
    (staging / ".rank1.json.gz.ab12cd34.tmp").write_bytes(b"torn")  # a rank killed mid-export
    (staging / "pids").mkdir()
    assert promote(staging, out) == out
    assert (out / "manifest.json").read_text() == '{"tag": "new"}'
    assert sorted(p.name for p in out.iterdir()) == ["launch.log", "manifest.json", "rank0.json.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # the old one renamed aside and deleted


def test_a_failed_run_leaves_out_byte_identical_and_keeps_the_partial_run(tmp_path: Path) -> None:
    out = recording(tmp_path / "run", "old")
    before = fingerprint(out)
    assert keep_failed(recording(staging_path(out), "older failure"), out) == failed_path(out)
    staging = recording(staging_path(out), "partial")
    kept = keep_failed(staging, out)
    assert kept == tmp_path / "run.failed"  # trainsim's own older failure is replaced
    assert fingerprint(out) == before
    assert (kept / "manifest.json").read_text() == '{"tag": "partial"}'
    assert (kept / FAILED_MARK).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run.failed"]


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_failed_run_never_replaces_a_name_failed_trainsim_did_not_make(tmp_path: Path, kind: str) -> None:
    out = recording(tmp_path / "run", "old")
    mine = failed_path(out)
    if kind == "directory":
        recording(mine, "the user's own")
    elif kind == "fifo":
        os.mkfifo(mine)
    else:
        (tmp_path / "elsewhere").mkdir()
        mine.symlink_to(tmp_path / "elsewhere")
    before = fingerprint(mine) if kind == "directory" else None
    first = keep_failed(recording(staging_path(out), "first failure"), out)
    second = keep_failed(recording(staging_path(out), "second failure"), out)
    assert first == second == tmp_path / "run.failed-2"  # trainsim's own slot, replaced the second time
    assert (second / "manifest.json").read_text() == '{"tag": "second failure"}'
    assert {"directory": lambda: fingerprint(mine) == before, "fifo": lambda: stat.S_ISFIFO(os.lstat(mine).st_mode),
            "symlink": lambda: mine.is_symlink() and not any((tmp_path / "elsewhere").iterdir())}[kind]()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run", "run.failed", "run.failed-2", *(["elsewhere"] if kind == "symlink" else [])])


def test_stale_staging_of_dead_launches_is_cleaned_and_live_ones_kept(tmp_path: Path) -> None:
    out = recording(tmp_path / "run", "current")
    dead = recording(tmp_path / f".run.partial-{dead_pid()}-abcd", "dead")
    live = recording(tmp_path / f".run.partial-{os.getpid()}-abcd", "live")
    other = recording(tmp_path / f".other.partial-{dead_pid()}-abcd", "another --out")
    assert clean_stale(out) == [dead]
    assert live.exists() and other.exists() and not dead.exists()


def test_an_aside_copy_comes_back_when_out_is_missing(tmp_path: Path) -> None:
    """The launcher died between renaming the old --out aside and the new one in."""
    aside = recording(tmp_path / f".run.old-{dead_pid()}-beef", "old")
    before = fingerprint(aside)
    clean_stale(tmp_path / "run")
    assert fingerprint(tmp_path / "run") == before and not aside.exists()


def test_an_out_with_foreign_files_is_refused(tmp_path: Path) -> None:
    check_out(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty")
    check_out(recording(tmp_path / "run", "x"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(ValueError, match=r"out='.*mine' is invalid: it holds files trainsim profile did not "
                                         r"write \(thesis.tex\)") as err:
        check_out(mine)
    assert "\n" not in str(err.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="it is a file"):
        check_out(tmp_path / "file")


def test_the_cli_refuses_a_foreign_out_before_launching(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    (tmp_path / "notes.txt").write_text("keep me")
    assert main(["profile", "--dp", "2", "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "notes.txt" in err
    assert sorted(p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}")) == []
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_temp_files_of_a_rank_killed_mid_export_are_removed(tmp_path: Path) -> None:
    write_json(tmp_path / "manifest.json", {"a": 1})
    torn = [temp_path(tmp_path / "rank0.json.gz"), tmp_path / ".manifest.json.abcdef12.tmp"]
    (tmp_path / "errors").mkdir()
    torn.append(tmp_path / "errors" / ".rank3.json.00ff11ee.tmp")
    for path in torn:
        path.write_bytes(b"partial")
    keep = [tmp_path / "rank0.json.gz", tmp_path / ".hidden-notes", tmp_path / ".rank0.json.gz.short.tmp"]
    for path in keep:
        path.write_bytes(b"x")
    assert sorted(remove_temp_files(tmp_path)) == sorted(torn)
    assert all(p.exists() for p in keep) and (tmp_path / "manifest.json").exists()


REPORT = """\
Failures:
[1]:
  time      : 2026-11-26_09:59:08
  rank      : 3 (local_rank: 3)
  exitcode  : -15 (pid: 20509)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 20508)  (SIGKILL)
"""


def test_torchrun_report_and_exit_descriptions() -> None:
    report = TorchrunReport()
    for line in REPORT.splitlines():
        report.feed(line)
    assert report.exit_codes == {3: -15, 0: -9}
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-signal.SIGTERM) == "killed by SIGTERM"
    assert describe_exit(3) == "exited with code 3"


def test_the_first_failure_is_the_earliest_record_or_exit() -> None:
    # rank 0 was SIGKILLed at t=100 (no record); ranks 1-3 wrote gloo errors after it
    records = {r: ErrorRecord(r, "RuntimeError: Connection closed by peer", 100.2 + r / 100) for r in (1, 2, 3)}
    exits = {0: 100.0, 1: 100.3, 2: 100.3, 3: 100.25}
    assert first_failure(records, exits, {0: -9, 1: 1, 2: 1, 3: 1}) == (0, "killed by SIGKILL")
    # an injected failure: the rank's own record, before its exit; rank 0 finished (exit 0)
    records = {1: ErrorRecord(1, "InjectedFailure: rank 1", 50.0)}
    assert first_failure(records, {0: 49.0, 1: 50.1}, {1: 1}) == (1, "InjectedFailure: rank 1")
    assert first_failure({}, {0: 1.0, 1: 2.0}, {}) is None


def test_a_rank_torchrun_stopped_with_sigterm_is_not_blamed() -> None:
    """Rank 1 SIGKILLed before its pid file (no exit time known); torchrun then SIGTERMed rank 0."""
    assert first_failure({}, {0: 10.0}, {0: -signal.SIGTERM, 1: -signal.SIGKILL}) == (1, "killed by SIGKILL")
    # a rank's own record is never set aside; a SIGTERM alone (someone else's) is still named
    records = {0: ErrorRecord(0, "RuntimeError: gloo timeout", 12.0)}
    assert first_failure(records, {0: 12.1}, {0: 1, 1: -signal.SIGTERM}) == (0, "RuntimeError: gloo timeout")
    assert first_failure({}, {0: 10.0, 1: 9.0}, {0: -signal.SIGTERM, 1: -signal.SIGTERM}) == (1, "killed by SIGTERM")


def test_the_failure_line_says_where_the_partial_run_went_when_not_name_failed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = ProfileRun(out_dir=tmp_path / "run.failed-2", returncode=1, wall_time_s=1.0, timed_out=False, traces=[],
                     manifest=None, first_failure=(1, "killed by SIGKILL"), requested_out=out)
    assert run.failure() == (f"rank 1 failed: killed by SIGKILL (partial run kept in {tmp_path / 'run.failed-2'}: "
                             "run.failed is not trainsim's)")
    usual = ProfileRun(out_dir=failed_path(out), returncode=1, wall_time_s=1.0, timed_out=False, traces=[],
                       manifest=None, first_failure=(1, "killed by SIGKILL"), requested_out=out)
    assert usual.failure() == "rank 1 failed: killed by SIGKILL"
    cut = ProfileRun(out_dir=failed_path(out), returncode=0, wall_time_s=1.0, timed_out=False, traces=[],
                     manifest={"world_size": 2}, requested_out=out, incomplete="rank 1 wrote no trace (rank1.json.gz)")
    assert not cut.ok and cut.failure() == ("the recording is incomplete: rank 1 wrote no trace (rank1.json.gz); "
                                            f"nothing written in {out}, partial run in {failed_path(out)}")


def test_profile_and_microbench_without_torch_say_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    for argv in (["profile", "--dp", "2", "--out", str(tmp_path / "run")],
                 ["calibrate", "--microbench", "--out", str(tmp_path / "p.toml")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.endswith("pip install 'trainsim[torch]'"), err
    assert not list(tmp_path.iterdir())
