"""The one file-writing rule (sim.atomic) and its use by every simulator output flag.

A FIFO, a device node, a socket or a directory where a file goes is refused in one line (exit 2)
and left untouched; a missing directory is never created; a write that fails (full disk, file-size
limit, short writes, fsync) leaves the previous file byte-identical and no temporary file; and
every command checks its output paths before doing any work.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sim import atomic
from sim.atomic import OutputKind, check_output, write_bytes_atomic, write_with
from sim.cli import cmd_explore, cmd_simulate
from sim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SPECIAL_NODES = ("fifo", "chardev", "socket", "directory")  # the root conftest's special_node makes them
SMALL = ["--model", "small", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "2", "--pp", "2", "--global-batch", "8"]


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("kind", SPECIAL_NODES)
def test_a_special_node_is_refused_by_name_and_left_untouched(tmp_path, special_node, kind):
    node = tmp_path / "out.html"
    untouched = special_node(kind, node)
    with pytest.raises(ValueError) as err:
        write_bytes_atomic(node, b"report", flag="--report")
    what = {"fifo": "a FIFO", "chardev": "a character device", "socket": "a socket", "directory": "a directory"}[kind]
    assert str(err.value).startswith(f"--report={str(node)!r} is invalid: it is {what}")
    assert "expected a regular file (or a symlink to one)" in str(err.value) and "\n" not in str(err.value)
    assert untouched() and entries(tmp_path) == ["out.html"]  # no temp file either


def test_a_symlink_to_a_fifo_or_to_nothing_is_refused(tmp_path, special_node):
    untouched = special_node("fifo", tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "pipe")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    with pytest.raises(ValueError, match="it is a symlink to a FIFO"):
        write_bytes_atomic(tmp_path / "link", b"x")
    with pytest.raises(ValueError, match="it is a symlink to nothing"):
        write_bytes_atomic(tmp_path / "dangling", b"x")
    assert untouched() and (tmp_path / "link").is_symlink() and not (tmp_path / "nothing").exists()


def test_a_symlink_to_a_file_is_written_through(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "42.html").write_text("old")
    (tmp_path / "latest.html").symlink_to(tmp_path / "runs" / "42.html")
    assert write_bytes_atomic(tmp_path / "latest.html", b"new") == tmp_path / "runs" / "42.html"
    assert (tmp_path / "latest.html").is_symlink() and (tmp_path / "runs" / "42.html").read_text() == "new"


def test_a_missing_directory_is_an_error_and_is_not_created(tmp_path):
    with pytest.raises(ValueError, match=r"its directory .*/no/such does not exist \(create it first\)"):
        write_bytes_atomic(tmp_path / "no" / "such" / "r.html", b"x", flag="--report")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file is not a directory"):
        check_output(tmp_path / "file" / "r.html")
    assert entries(tmp_path) == ["file"]


def test_a_directory_output_may_be_new_or_existing_but_its_parent_must_exist(tmp_path, special_node):
    assert check_output(tmp_path / "sweep", "--out", OutputKind.DIRECTORY) == tmp_path / "sweep"
    assert check_output(tmp_path, "--out", OutputKind.DIRECTORY) == tmp_path
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="it is a file; expected a directory, or a new directory name"):
        check_output(tmp_path / "file", "--out", OutputKind.DIRECTORY)
    untouched = special_node("fifo", tmp_path / "pipe")
    with pytest.raises(ValueError, match="it is a FIFO"):
        check_output(tmp_path / "pipe", "--out", OutputKind.DIRECTORY)
    with pytest.raises(ValueError, match="does not exist"):
        check_output(tmp_path / "a" / "sweep", "--out", OutputKind.DIRECTORY)
    assert untouched() and not (tmp_path / "a").exists()


def failing_write(after: int, code: int):
    """An os.write that writes ``after`` bytes in total, then fails with ``code``."""
    real, written = os.write, [0]

    def write(fd, data):
        if written[0] >= after:
            raise OSError(code, os.strerror(code))
        n = real(fd, bytes(data[:after - written[0]]))
        written[0] += n
        return n
    return write


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO])
def test_a_failed_write_keeps_the_previous_file_and_removes_the_temp_file(tmp_path, monkeypatch, code):
    target = tmp_path / "r.json"
    target.write_bytes(b"previous")
    monkeypatch.setattr(atomic.os, "write", failing_write(100, code))
    with pytest.raises(OSError) as err:
        write_bytes_atomic(target, b"n" * 10_000)
    assert err.value.errno == code and "the previous file is unchanged" in str(err.value)
    assert str(target) in str(err.value)
    assert target.read_bytes() == b"previous" and entries(tmp_path) == ["r.json"]


def test_short_writes_are_continued_and_a_stalled_write_fails(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(atomic.os, "write", lambda fd, data: real(fd, bytes(data[:7])))  # 7 bytes at a time
    data = bytes(range(256)) * 40
    assert write_bytes_atomic(tmp_path / "r.bin", data).read_bytes() == data
    monkeypatch.setattr(atomic.os, "write", lambda fd, data: 0)
    with pytest.raises(OSError, match="nothing was written") as err:
        write_bytes_atomic(tmp_path / "new.bin", b"x")
    assert err.value.errno == errno.ENOSPC and entries(tmp_path) == ["r.bin"]


def test_an_fsync_failure_promotes_nothing(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_bytes(b"previous")

    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error; the previous file is unchanged"):
        write_bytes_atomic(tmp_path / "r.json", b"new")
    assert (tmp_path / "r.json").read_bytes() == b"previous" and entries(tmp_path) == ["r.json"]


def test_too_little_free_space_fails_before_writing(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_bytes(b"previous")
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_bavail, self.f_frsize = 2, st.f_frsize

    monkeypatch.setattr(atomic.os, "statvfs", lambda path: Full(real(path)))
    with pytest.raises(OSError, match="bytes free; the previous file is unchanged") as err:
        write_bytes_atomic(tmp_path / "r.json", b"n" * (3 * os.statvfs(tmp_path).f_frsize))
    assert err.value.errno == errno.ENOSPC
    assert (tmp_path / "r.json").read_bytes() == b"previous" and entries(tmp_path) == ["r.json"]


FSIZE_CHILD = """
import sys
from pathlib import Path
from sim.atomic import write_bytes_atomic, write_with
target = Path(sys.argv[1])
for write in (lambda: write_bytes_atomic(target, b"n" * 300_000),
              lambda: write_with(target, lambda tmp: tmp.write_bytes(b"n" * 300_000))):
    try:
        write()
    except OSError as exc:
        print(exc.errno, exc)
"""


def test_the_file_size_limit_is_checked_and_a_cut_write_promotes_nothing(tmp_path):
    """``ulimit -f 200``: 300 kB refused before writing (known size) or when the write hits the
    limit (EFBIG: Python ignores SIGXFSZ); the previous file stays."""
    target = tmp_path / "r.json"
    target.write_bytes(b"previous")

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    out = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(target)], cwd=REPO, capture_output=True,
                         text=True, timeout=120, preexec_fn=limit)
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{errno.EFBIG} ") for line in lines), out
    assert "exceed the file-size limit of 204,800 bytes (ulimit -f)" in lines[0]
    assert target.read_bytes() == b"previous" and entries(tmp_path) == ["r.json"]


def test_write_with_keeps_the_previous_file_when_fill_fails(tmp_path):
    (tmp_path / "t.gz").write_bytes(b"previous")

    def fill(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("exporter crashed")

    with pytest.raises(RuntimeError):
        write_with(tmp_path / "t.gz", fill)
    assert (tmp_path / "t.gz").read_bytes() == b"previous" and entries(tmp_path) == ["t.gz"]


@pytest.fixture
def no_simulation(monkeypatch):
    """Commands must refuse an output path before simulating or sweeping anything."""
    def refuse(*args, **kwargs):
        raise AssertionError("the work started before the output paths were checked")

    monkeypatch.setattr(cmd_simulate, "simulate", refuse)
    monkeypatch.setattr(cmd_explore, "run_sweep", refuse)


FILE_FLAGS = [["simulate", *SMALL, "--report"], ["simulate", *SMALL, "--chrome-trace"],
              ["compare", *SMALL, "--schedules", "1f1b,gpipe", "--report"], ["schedule", "--report"]]
DIRECTORY_FLAGS = [["explore", "--model", "small", "--cluster", "dgx-h100:8", "--out"]]


@pytest.mark.parametrize("argv", FILE_FLAGS + DIRECTORY_FLAGS, ids=lambda a: f"{a[0]}-{a[-1]}")
@pytest.mark.parametrize("kind", [*SPECIAL_NODES, "missing-parent"])
def test_every_simulator_output_flag_refuses_special_files_and_missing_directories(
        refuses_output, no_simulation, argv, kind):
    refuses_output(argv, kind, argv in DIRECTORY_FLAGS)


def test_the_plotly_bundle_beside_a_report_is_checked_too(tmp_path, monkeypatch, capsys, special_node, no_simulation):
    from sim.report.plotly_js import ASSET_DIR, PlotlyJs, bundle_name

    monkeypatch.chdir(tmp_path)
    assets = special_node("fifo", tmp_path / ASSET_DIR)
    assert main(["simulate", *SMALL, "--report", "r.html"]) == 2
    assert f"--plotly-js assets='{ASSET_DIR}' is invalid: it is a FIFO" in capsys.readouterr().err and assets()
    legacy = special_node("socket", tmp_path / bundle_name(PlotlyJs.DIRECTORY))
    assert main(["simulate", *SMALL, "--report", "r.html", "--plotly-js", "directory"]) == 2
    assert "--plotly-js directory='plotly.min.js' is invalid: it is a socket" in capsys.readouterr().err and legacy()
    assert not (tmp_path / "r.html").exists()
