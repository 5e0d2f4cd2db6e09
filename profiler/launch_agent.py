"""The process the launcher starts torchrun through: ``python -m profiler.launch_agent PID -- ARGV``.

It asks the kernel to send it SIGTERM when its parent (the launcher, pid ``PID``) dies
(``PR_SET_PDEATHSIG``: a SIGKILLed launcher cannot stop anything itself), makes itself the
subreaper of what it starts (``PR_SET_CHILD_SUBREAPER``: ranks orphaned by a dead torchrun stay
below it and findable), then runs ARGV (torchrun) as its child in its own process group. On
SIGTERM, SIGINT or SIGHUP it stops torchrun and every rank (:func:`profiler.launch_stop.stop_tree`:
SIGTERM, 5 s, SIGKILL) and exits 128 + the signal. When torchrun exits on its own, leftover
processes are stopped the same way and its exit code is passed on (a signal death as 128 + it).
Linux only (prctl); elsewhere it simply runs ARGV.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from profiler.launch_stop import descendants, stop_tree

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_received: list[int] = []


def _prctl(option: int, value: int) -> bool:
    """Call prctl(2); False where it is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(option, value, 0, 0, 0) == 0)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


def exit_code(returncode: int) -> int:
    """A Popen return code as a shell exit code (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Run torchrun under the agent; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        print("usage: python -m profiler.launch_agent PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent, command = int(args[0]), args[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # the launcher died before the death signal was armed
        return 128 + signal.SIGTERM
    child = subprocess.Popen(command)
    while not _received:
        try:
            child.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            continue
    if _received:
        stop_tree(child)
        stop_tree(None, root=os.getpid())
        return 128 + _received[0]
    if descendants(os.getpid()):
        stop_tree(None, root=os.getpid())
    return exit_code(child.returncode if child.returncode is not None else 1)


if __name__ == "__main__":
    sys.exit(main())
