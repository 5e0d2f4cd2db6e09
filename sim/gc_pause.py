"""Keep Python's cyclic garbage collector off work that makes millions of small, acyclic objects.

Tasks, ops, events and parsed trace events are freed by reference counting; the collector's
repeated passes over them cost up to half of a run. :func:`gc_paused` pauses it around such work.
A process that trainsim owns (the ``trainsim`` program, explore's worker processes:
:func:`own_process`) may also move what outlives each unit of work out of the collector's sight
(:func:`freeze_survivors`): a sweep's caches of graphs and prices grow to millions of objects,
and the collector's passes over them, which find nothing to free, were ~10% of a fully timed sweep.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_OWNED = [False]  # set by own_process(): the process runs trainsim and nothing else


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


def own_process() -> None:
    """Declare that this process runs trainsim only (the ``trainsim`` program, a worker process
    of explore's pool): :func:`freeze_survivors` may act. Library callers keep their collector
    as it is."""
    _OWNED[0] = True


def freeze_survivors() -> None:
    """In a process trainsim owns, move every object alive now to the collector's permanent
    generation (``gc.freeze``), so that its later passes walk only newer objects. Frozen objects
    are still freed by reference counting when dropped (a cache's evicted entries); only cycles
    among them wait for the process's end, which the few an explore plan leaves (~1 object per
    plan, measured with ``gc.callbacks`` on the 18B grid) make negligible. A no-op elsewhere."""
    if _OWNED[0]:
        gc.freeze()
