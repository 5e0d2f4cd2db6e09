"""stop_tree stops a launch for good: the leader's process group and every descendant's own
session (as torchrun's ranks have), SIGTERM first, SIGKILL for what ignores it, and returns only
when nothing is left; it never signals the caller's own group. No torch needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from profiler.launch_stop import alive, descendants, stop_tree

# a leader that starts two "ranks" in new sessions (like torchrun), one of which ignores SIGTERM
TREE = """
import signal, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for code in (
    "import time; time.sleep(600)",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)",
)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


def start_tree() -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    ranks = [int(p) for p in proc.stdout.readline().split()]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not set(ranks) <= descendants(proc.pid):
        time.sleep(0.01)
    time.sleep(0.3)  # the second rank has installed its SIGTERM handler
    return proc, ranks


@pytest.mark.slow  # spawns and kills process trees
def test_stop_tree_kills_every_session_and_returns_when_nothing_is_left() -> None:
    proc, ranks = start_tree()
    assert all(alive(pid) for pid in ranks)
    assert {os.getpgid(pid) for pid in ranks} == set(ranks)  # each rank leads its own group
    start = time.monotonic()
    left = stop_tree(proc, grace_s=0.5)
    took = time.monotonic() - start
    assert left == set()
    assert proc.returncode == -signal.SIGTERM
    assert not any(alive(pid) for pid in [proc.pid, *ranks])
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    assert 0.5 <= took  # the rank that ignored SIGTERM waited for the grace, then SIGKILL
    assert alive(os.getpid())  # and the caller is untouched


@pytest.mark.slow  # spawns and kills process trees
def test_stop_tree_with_extra_pids_reaches_orphans() -> None:
    """A rank orphaned by a dead leader is found through the pids the ranks wrote."""
    proc, ranks = start_tree()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert all(alive(pid) for pid in ranks)  # orphans, no longer below the leader
    assert stop_tree(proc, extra_pids=ranks, grace_s=0.5) == set()
    assert not any(alive(pid) for pid in ranks)
