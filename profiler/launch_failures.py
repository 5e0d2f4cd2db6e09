"""Which rank failed first, and how.

Three witnesses, each with a time: the one-line error records the ranks write before exiting
(``errors/rank<N>.json``, unix time), the moment each rank's process ended (a pidfd per rank pid
from ``pids/rank<N>.pid``, watched by :class:`ExitWatch`), and torchrun's failure report in its
output (``rank : N`` / ``exitcode : C``: how each failed rank ended). A rank killed by a signal
writes no record, and the ranks whose collectives it broke write theirs a moment after it died;
so the first failure is the earliest of a failed rank's record and its exit, not the earliest
record (kill rank 0 of 4 and gloo errors on ranks 1-3 follow). Once a rank fails torchrun stops
the others with SIGTERM: a rank that ended by SIGTERM without a record of its own is blamed only
when no other rank failed (kill rank 1 early, before its pid is known, and rank 0, stopped by
torchrun, is not the one named).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from profiler.trainer.files import ERRORS_DIR, PIDS_DIR

_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)\b")
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\b")


@dataclass(frozen=True)
class ErrorRecord:
    """A rank's own one-line error: ``Type: message`` and when it was written (unix seconds)."""

    rank: int
    text: str
    time_unix_s: float


def read_error_records(out_dir: Path) -> dict[int, ErrorRecord]:
    """The error records in ``out_dir/errors`` (unreadable ones skipped)."""
    records = {}
    for path in sorted((out_dir / ERRORS_DIR).glob("rank*.json")):
        try:
            raw = json.loads(path.read_text())
            record = ErrorRecord(int(raw["rank"]), f"{raw['type']}: {raw['message']}", float(raw["time_unix_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        records[record.rank] = record
    return records


class TorchrunReport:
    """Exit codes of failed ranks, read line by line from torchrun's output."""

    def __init__(self) -> None:
        self.exit_codes: dict[int, int] = {}
        self._rank: int | None = None

    def feed(self, line: str) -> None:
        """Read one output line (``rank : N`` then ``exitcode : C`` in torchrun's report)."""
        match = _RANK_RE.match(line)
        if match:
            self._rank = int(match.group(1))
            return
        match = _EXIT_RE.match(line)
        if match and self._rank is not None:
            self.exit_codes.setdefault(self._rank, int(match.group(1)))
            self._rank = None


def describe_exit(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ExitWatch:
    """Watches the ranks' processes (pids from ``pids/``) and notes when each one ends.

    A daemon thread polls for new pid files every 20 ms and waits on a pidfd per rank, so an
    exit is timed to within milliseconds. A rank whose process was already gone when its pid
    file was seen gets the pid file's time (it ended after writing it)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.pids: dict[int, int] = {}
        self.exit_unix_s: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainsim-exit-watch", daemon=True)

    def start(self) -> ExitWatch:
        """Start watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (after one last look)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _new_ranks(self, fds: dict[int, int]) -> None:
        for path in (self.out_dir / PIDS_DIR).glob("rank*.pid"):
            try:
                rank, pid = int(path.stem[4:]), int(path.read_text())
                seen_s = path.stat().st_mtime
            except (OSError, ValueError):
                continue
            if rank in self.pids:
                continue
            self.pids[rank] = pid
            try:
                fds[os.pidfd_open(pid)] = rank
            except (ProcessLookupError, OSError, AttributeError):
                self.exit_unix_s[rank] = seen_s

    def _run(self) -> None:
        fds: dict[int, int] = {}
        poller = select.poll()
        polled: set[int] = set()
        try:
            while True:
                stopping = self._stop.is_set()
                self._new_ranks(fds)
                for fd in fds.keys() - polled:
                    poller.register(fd, select.POLLIN)
                    polled.add(fd)
                for fd, _ in poller.poll(20):
                    self.exit_unix_s.setdefault(fds[fd], time.time())
                    poller.unregister(fd)
                    polled.discard(fd)
                    fds.pop(fd)
                    os.close(fd)
                if stopping:
                    return
        finally:
            for fd in fds:
                os.close(fd)


def first_failure(records: dict[int, ErrorRecord], exit_unix_s: dict[int, float],
                  exit_codes: dict[int, int]) -> tuple[int, str] | None:
    """The rank that failed first and its one-line reason, or None if no rank is known to have
    failed. A rank failed if it wrote an error record or torchrun reports a non-zero exit
    code for it; its time is the earlier of its record and its process's end. Ranks SIGTERMed
    (by torchrun, after another's failure) come after every other failed rank."""
    failed = set(records) | {rank for rank, code in exit_codes.items() if code != 0}
    if not failed:
        return None

    def when(rank: int) -> float:
        times = [t for t in (records[rank].time_unix_s if rank in records else None, exit_unix_s.get(rank))
                 if t is not None]
        return min(times) if times else float("inf")

    def stopped_by_torchrun(rank: int) -> bool:
        return rank not in records and exit_codes.get(rank) == -signal.SIGTERM

    rank = min(failed, key=lambda r: (stopped_by_torchrun(r), when(r), r))
    if rank in records:
        return rank, records[rank].text
    return rank, describe_exit(exit_codes[rank])
