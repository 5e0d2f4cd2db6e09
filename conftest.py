"""Suite-wide test settings (at the repo root: a tests/conftest.py would put tests/ on sys.path
and make tests/topo shadow the topo package): Hypothesis without its per-example deadline; the
``time_limit`` and ``special_node`` fixtures.

Hypothesis fails an example that takes longer than 200 ms by default; on a loaded machine (other
jobs on the same cores) a sound example can take that long, so the deadline is off for every
property test. Hangs are caught by the tests' own guards, not by this deadline.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("trainsim", deadline=None)
settings.load_profile("trainsim")


class Hang(Exception):
    """A block guarded by the ``time_limit`` fixture ran past its limit."""


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def time_limit() -> Callable[[int], AbstractContextManager[None]]:
    """``with time_limit(s):`` raises :class:`Hang` if the block runs longer than ``s`` seconds
    (SIGALRM: main thread, POSIX); the fuzz tests turn a hang into a failure with it."""
    return _time_limit


def _make_node(kind: str, path: Path) -> Callable[[], bool]:
    """Create a ``kind`` node at ``path`` (a private one, never under /dev); returns a check
    that it is still the same node, untouched. Skips when this user may not create it."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":  # a private copy of /dev/null's node (1, 3); needs CAP_MKNOD
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs CAP_MKNOD")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        path.mkdir()
        (path / "keep.txt").write_text("mine")
    before = os.lstat(path)

    def untouched() -> bool:
        now = os.lstat(path)
        same = (now.st_ino, now.st_mode, now.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
        return same and (kind != "directory" or sorted(p.name for p in path.iterdir()) == ["keep.txt"])

    return untouched


@pytest.fixture
def special_node() -> Callable[[str, Path], Callable[[], bool]]:
    """``special_node(kind, path)``: make a FIFO (``fifo``), a character device (``chardev``), a
    socket (``socket``) or a directory (``directory``) at ``path``; returns a function telling whether it is still untouched."""
    return _make_node


def _refused_output(kind: str, base: Path, takes_directory: bool) -> tuple[Path, Callable[[], bool]]:
    """A path in ``base`` that an output flag must refuse, and a check that it was left alone:
    ``kind`` one of ``special_node``'s, or ``missing-parent`` (a name in a directory that does not
    exist, and must not be created). For a flag that takes a directory, ``directory`` becomes a
    regular file (what such a flag refuses)."""
    if kind == "missing-parent":
        return base / "a" / "x", lambda: not (base / "a").exists()
    path = base / "x"
    if kind == "directory" and takes_directory:
        path.write_text("mine")
        return path, lambda: path.read_text() == "mine"
    return path, _make_node(kind, path)


@pytest.fixture
def refuses_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str], str, bool], None]:
    """``refuses_output(argv, kind, takes_directory)`` runs ``trainsim *argv PATH`` in ``tmp_path``
    with PATH a ``kind`` path the flag (``argv[-1]``) must refuse (:func:`_refused_output`), and
    asserts: exit 2, one line naming the flag and PATH, PATH untouched, no temporary file."""
    from sim.cli.main import main

    monkeypatch.chdir(tmp_path)

    def check(argv: list[str], kind: str, takes_directory: bool) -> None:
        path, untouched = _refused_output(kind, tmp_path, takes_directory)
        assert main([*argv, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{argv[-1]}={str(path)!r} is invalid" in err, err
        assert untouched()
        assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []

    return check
