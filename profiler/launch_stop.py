"""Stopping a launch for good: torchrun's process group and every rank's, SIGTERM then SIGKILL.

torchrun starts each rank in a new session (its own process group), so stopping torchrun's
group alone leaves the ranks running. :func:`stop_tree` finds the processes to stop (the
descendants of the root, found in ``/proc``, plus pids the ranks wrote), sends SIGTERM to each
one's process group, waits up to ``grace_s``, sends SIGKILL to whatever is left, and returns
only when none of them is left (zombies count as gone: they hold no resources and their parent
reaps them). Only groups led by a process of the launch are signalled, never the caller's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

TERM_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
KILL_WAIT_S = 10.0  # how long to wait for SIGKILLed processes to disappear
_POLL_S = 0.02


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of ``pid`` from /proc, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _table() -> dict[int, tuple[str, int, int]]:
    """(state, ppid, pgid) of every process in /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                table[int(entry.name)] = stat
    return table


def descendants(root: int, table: dict[int, tuple[str, int, int]] | None = None) -> set[int]:
    """Every process below ``root`` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in (table if table is not None else _table()).items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pids: Iterable[int], leaders: Iterable[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each process group in ``leaders`` (never our own) and to each pid."""
    own = os.getpgrp()
    for pgid in set(leaders) - {own, 0}:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(proc: subprocess.Popen[str] | subprocess.Popen[bytes] | None,
          table: dict[int, tuple[str, int, int]]) -> None:
    """Reap ``proc`` and zombie children of ours (orphans reparented to a subreaper)."""
    if proc is not None:
        proc.poll()
    me = os.getpid()
    for pid, (state, ppid, _) in table.items():
        if state == "Z" and ppid == me and (proc is None or pid != proc.pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _left(pids: set[int], groups: set[int], table: dict[int, tuple[str, int, int]]) -> set[int]:
    """Live processes among ``pids`` or in one of ``groups``."""
    return {pid for pid, (state, _, pgid) in table.items()
            if state not in ("Z", "X") and (pid in pids or pgid in groups)}


def stop_tree(proc: subprocess.Popen[str] | subprocess.Popen[bytes] | None, *, root: int | None = None,
              extra_pids: Iterable[int] = (), grace_s: float = TERM_GRACE_S) -> set[int]:
    """Stop ``proc`` (a session leader: its pid is its process group) or the children of ``root``,
    every descendant and every pid in ``extra_pids``; returns the pids still alive after
    ``KILL_WAIT_S`` of SIGKILL (empty unless something is unkillable)."""
    top = proc.pid if proc is not None else root
    assert top is not None  # noqa: S101 - one of proc or root is given
    me = os.getpid()
    table = _table()
    pids = {p for p in (*extra_pids, *descendants(top, table)) if p != me}
    if proc is not None:
        pids.add(proc.pid)
    # process groups led by one of ours: torchrun's (proc is a session leader) and each rank's
    groups = {pid for pid in pids if pid in table and table[pid][2] == pid} - {os.getpgrp()}
    left = pids
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        _signal(pids, groups, sig)
        until = time.monotonic() + wait_s
        while True:
            table = _table()
            _reap(proc, table)
            new = descendants(top, table) - pids - {me}
            if new:  # started while we were stopping (torchrun starting a worker)
                pids |= new
                _signal(new, (), sig)
            left = _left(pids, groups, _table())
            if not left:
                if proc is not None:
                    proc.wait()
                return set()
            if time.monotonic() >= until:
                break
            time.sleep(_POLL_S)
    return left
