"""Pause Python's cyclic garbage collector around work that allocates millions of small,
acyclic objects (tasks, ops, events; parsed trace events): they are freed by reference
counting, and the collector's repeated passes over them cost up to half of the run."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block without the cyclic collector (restored on exit; it then collects any cycles)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
