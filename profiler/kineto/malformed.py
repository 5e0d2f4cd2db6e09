"""Malformed trace events: which ones are skipped (counted and reported) and which stop the parse.

Skip policy. An entry of ``traceEvents`` that cannot be one of our events is left out of the
Timeline, counted by :class:`Skip` kind, and reported once per file and kind (one WARNING line
on stderr, ``Timeline.meta.malformed_events``, ``analyze --json`` key ``malformed_events``).
The count keeps the index of the first such entry in the file's ``traceEvents`` array and the
offending value, so the report points at it. Skipped: entries that are not objects, ``X``
events whose ``name``/``cat`` is not a string or number, whose ``ts`` is not a finite number of
µs within ±1e17, whose ``dur`` is missing, null, not a number, negative, not finite or above
1e17 µs, whose ``pid``/``tid`` is a list/object or an integer beyond int64;
``ProfilerStep#N``/``trainsim:`` numbers beyond int64; profiler steps of zero duration.
Kept with the bad field ignored: ``args`` that is not an object (the event keeps no args), a
``correlation`` that is not an integer (-1: no GPU link), ``bytes`` of a copy that is not a
finite number ≥ 0 (0).

Errors (one line, exit 2, never a skip): the file is not valid JSON (position of the first bad
token), a truncated or over-expanding gzip stream, the header's ``distributedInfo`` not an
object, its ``rank``/``world_size`` not integers in range (see ``header.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

MAX_TIME_US = 1e17
"""Largest |ts| and dur accepted, µs (about 3,000 years: real traces are below 1e16)."""
INT64_MAX = (1 << 63) - 1


class Skip(enum.Enum):
    """Kinds of skipped (or partly ignored) events; the value is the report text."""

    ENTRY_NOT_OBJECT = "traceEvents entry that is not an object"
    NAME_NOT_STRING = "name that is a list or object"
    CAT_NOT_STRING = "cat that is a list or object"
    ARGS_NOT_OBJECT = "args that is not an object (args ignored)"
    TS_NOT_NUMBER = "ts missing or not a number"
    TS_OUT_OF_RANGE = "ts not finite or beyond 1e17 us"
    DUR_MISSING = "dur missing or null"
    DUR_NOT_NUMBER = "dur not a number"
    DUR_NEGATIVE = "negative dur"
    DUR_OUT_OF_RANGE = "dur not finite or beyond 1e17 us"
    ID_INVALID = "pid/tid that is a list, object or integer beyond int64"
    CORRELATION_INVALID = "correlation that is not an integer (treated as -1)"
    BYTES_INVALID = "bytes that is not a finite number >= 0 (treated as 0)"
    NUMBER_TOO_LARGE = "ProfilerStep#/trainsim: number beyond int64"
    STEP_NOT_POSITIVE = "ProfilerStep of zero duration"

    @property
    def key(self) -> str:
        """The JSON key of this kind (lower-case enum name)."""
        return self.name.lower()


@dataclass
class SkipCount:
    """How many events of one kind were skipped, and the first one (event index, value)."""

    count: int
    first_event: int
    first_value: str

    def merged(self, other: SkipCount) -> SkipCount:
        """Sum of two counts; the first event is the earlier one."""
        first = self if self.first_event <= other.first_event or other.first_event < 0 else other
        return SkipCount(self.count + other.count, first.first_event, first.first_value)


Malformed = dict[Skip, SkipCount]


def value_text(value: Any, limit: int = 40) -> str:
    """A short repr of a bad value for the report."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def note(counts: Malformed, kind: Skip, event: int, value: Any, n: int = 1) -> None:
    """Count ``n`` skips of ``kind``; the first one seen keeps its event index and value."""
    old = counts.get(kind)
    new = SkipCount(n, event, value_text(value))
    counts[kind] = new if old is None else old.merged(new)


def merge(into: Malformed, other: Malformed, offset: int = 0) -> None:
    """Add ``other``'s counts (event indices shifted by ``offset``) to ``into``."""
    for kind, c in other.items():
        shifted = SkipCount(c.count, c.first_event + offset if c.first_event >= 0 else -1, c.first_value)
        into[kind] = shifted if kind not in into else into[kind].merged(shifted)


def warning_lines(file: str, counts: Malformed) -> list[str]:
    """One line per kind: ``<file>: skipped N event(s) with <what> (first: event #i, value v)``."""
    out = []
    for kind in Skip:
        c = counts.get(kind)
        if c is None:
            continue
        where = f"event #{c.first_event}, " if c.first_event >= 0 else ""
        out.append(f"{file}: skipped {c.count} event(s) with {kind.value} (first: {where}value {c.first_value})")
    return out


def as_json(counts: Malformed) -> dict[str, int]:
    """``{kind key: count}`` in enum order."""
    return {k.key: counts[k].count for k in Skip if k in counts}
