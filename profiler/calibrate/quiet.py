"""How busy other processes keep this machine: measured, and waited out, around timed work.

Timing on a shared machine is only meaningful when nothing else competes for the cores. The
monitor reads every process's CPU time from ``/proc`` (Linux) and attributes it to this process
tree (this process and its descendants: our benchmark or training ranks) or to the background.
``background_cores`` is the background's average number of busy cores over the window; a run
recorded while it was high is flagged (and re-recorded by ``validate --record``). Processes
niced to ``IGNORED_NICE`` or more are not counted: the kernel gives them a tiny share of a core
(weight 15 against 1024 at nice 19) whenever normal-priority work wants it, so they do not slow
the timed work down (they only fill cores it leaves idle). Where ``/proc`` is missing the monitor
reports 0 (unknown) rather than failing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
IGNORED_NICE = 10  # processes at this nice level or lower priority are not background load


def _cpu_times() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user+system CPU seconds) of every readable process (0 CPU seconds for
    processes niced to ``IGNORED_NICE`` or more)."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / hz if int(fields[16]) < IGNORED_NICE else 0.0
        out[int(entry.name)] = (int(fields[1]), cpu_s)
    return out


def _descendants(root: int, table: dict[int, tuple[int, float]]) -> set[int]:
    mine, grew = {root}, True
    while grew:
        grew = False
        for pid, (ppid, _) in table.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return mine


@dataclass
class BackgroundMonitor:
    """Samples /proc every ``interval_s`` in a thread; ``background_cores`` after :meth:`stop`."""

    interval_s: float = 0.5
    root: int = field(default_factory=os.getpid)
    background_cpu_s: float = 0.0
    wall_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundMonitor:
        """Begin sampling."""
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop sampling; returns the background's average busy cores."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.background_cores

    @property
    def background_cores(self) -> float:
        """Average cores busy with other processes' work over the sampled window."""
        return self.background_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def _loop(self) -> None:
        prev, t_prev = _cpu_times(), time.monotonic()
        stopped = False
        while not stopped:
            # The last pass samples the partial interval up to stop(), so a short window counts too.
            stopped = self._stop.wait(self.interval_s)
            cur, t_cur = _cpu_times(), time.monotonic()
            mine = _descendants(self.root, cur)
            self.background_cpu_s += sum(max(0.0, cpu - prev[pid][1]) for pid, (_, cpu) in cur.items()
                                         if pid in prev and pid not in mine)
            self.wall_s += t_cur - t_prev
            prev, t_prev = cur, t_cur


def background_cores(window_s: float = 2.0) -> float:
    """Average cores used by other processes over the next ``window_s`` seconds."""
    monitor = BackgroundMonitor(interval_s=min(0.5, window_s / 2)).start()
    time.sleep(window_s)
    return monitor.stop()


def wait_for_quiet(threshold_cores: float = 0.15, window_s: float = 2.0, max_wait_s: float = 600.0) -> float:
    """Block until other processes use under ``threshold_cores`` for a window (or the time runs
    out); returns the last measured background."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy = background_cores(window_s)
        if busy < threshold_cores or time.monotonic() >= deadline:
            return busy
