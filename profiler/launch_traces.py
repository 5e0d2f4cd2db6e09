"""Whether a launch's recording is whole: every rank's trace present, parsing and holding events.

A run whose ranks all exited 0 can still have recorded nothing usable: under a full disk or a
file-size limit (``ulimit -f``) a trace export is cut short. Before ``--out`` is replaced, each
rank's ``rank<N>.json.gz`` is read to its end with the project's own Kineto reader
(:func:`profiler.kineto.reader.read_events`, the reader ``analyze`` uses), so a recording that
``analyze`` could not read never replaces a good one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.kineto.reader import read_events
from profiler.trainer.files import trace_name


def count_events(path: Path) -> int:
    """The number of events in a trace file, read to its end (ValueError/OSError if it cannot be)."""
    seen = [0]

    def count(batch: list[Any]) -> None:
        seen[0] += len(batch)

    read_events(path, count)
    return seen[0]


def trace_problem(directory: Path, world_size: int) -> str | None:
    """Why the recording in ``directory`` is not whole (one line naming the rank and its file),
    or None when every rank's trace parses and holds events."""
    for rank in range(world_size):
        path = directory / trace_name(rank)
        if not path.is_file():
            return f"rank {rank} wrote no trace ({path.name})"
        try:
            events = count_events(path)
        except (ValueError, OSError) as exc:
            return f"rank {rank}'s trace {path.name} does not parse ({' '.join(str(exc).split())[:200]})"
        if events == 0:
            return f"rank {rank}'s trace {path.name} holds no events"
    return None
