"""Output files: written whole (temp file + rename), with the mode open() would give (0666 minus
the umask), and only the files asked for (--json writes no report unless --report is given)."""

import os
import stat

import pytest

from sim import atomic
from sim.atomic import write_bytes_atomic, write_text_atomic
from sim.cli.main import main

SMALL = ["--model", "small", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "2", "--pp", "2", "--global-batch", "8"]


@pytest.fixture
def umask():
    """Set a umask for the test and restore the old one."""
    saved = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_gives_the_mode_open_would(tmp_path, umask, mask, expected):
    umask(mask)
    path = write_text_atomic(tmp_path / "r.html", "<html></html>")
    with open(tmp_path / "plain.txt", "w") as fh:  # the reference: what open() creates under this umask
        fh.write("x")
    assert mode(path) == expected == mode(tmp_path / "plain.txt")
    assert path.read_text() == "<html></html>"


def test_atomic_write_replaces_whole_and_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    write_bytes_atomic(target, b"old")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", fail)
    with pytest.raises(OSError):
        write_bytes_atomic(target, b"new" * 1000)
    assert target.read_bytes() == b"old"  # the old file intact, not half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # the temp file removed


def test_atomic_write_refuses_a_directory(tmp_path):
    with pytest.raises(ValueError, match="it is a directory; expected a regular file"):
        write_text_atomic(tmp_path, "x")
    assert tmp_path.is_dir()


def test_simulate_writes_report_and_trace_0644(in_tmp, umask, capsys):
    assert main(["simulate", *SMALL, "--chrome-trace", "t.json"]) == 0
    assert mode(in_tmp / "report.html") == 0o644 and mode(in_tmp / "t.json") == 0o644
    assert [p.name for p in in_tmp.iterdir() if p.name.startswith(".")] == []


def test_json_writes_no_report_unless_asked(in_tmp, capsys):
    assert main(["simulate", *SMALL, "--json"]) == 0
    assert not (in_tmp / "report.html").exists()
    assert main(["simulate", *SMALL, "--json", "--report", "mine.html"]) == 0
    assert (in_tmp / "mine.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["schedule", "--json"]) == 0
    assert main(["compare", "--schedules", "1f1b", *SMALL, "--json"]) == 0
    assert not (in_tmp / "schedule.html").exists() and not (in_tmp / "compare.html").exists()


def test_without_json_the_default_report_is_written(in_tmp, capsys):
    assert main(["schedule"]) == 0
    assert "timeline: schedule.html" in capsys.readouterr().out
    assert (in_tmp / "schedule.html").exists()


def test_report_and_no_report_conflict_in_one_line(in_tmp, capsys):
    assert main(["schedule", "--report", "a.html", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-report" in err and "--report" in err
