"""Suite-wide test settings (at the repo root: a tests/conftest.py would put tests/ on sys.path
and make tests/topo shadow the topo package): Hypothesis without its per-example deadline.

Hypothesis fails an example that takes longer than 200 ms by default; on a loaded machine (other
jobs on the same cores) a sound example can take that long, so the deadline is off for every
property test. Hangs are caught by the tests' own guards, not by this deadline.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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
