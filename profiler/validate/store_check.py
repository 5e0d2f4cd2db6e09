"""Check a stored timeline (``timeline.json.gz``, :mod:`profiler.validate.store`) before it is read.

The file is trainsim's own, but recordings are shared and edited: a damaged one must be a
one-line error naming the key, not an IndexError from deep inside numpy. Checked: the format
tag; ``columns`` (every column the reader uses, lists of one length: integers, durations >= 0,
codes inside their vocabulary, bytes numbers >= 0); ``vocab`` (lists of texts); ``meta``
(``world_size`` an integer >= 1, ``rank_pp`` rank -> pipeline rank, ``step_windows`` rows of
rank, step, start and end seconds with start <= end, ``steps_kept``/``profiler_steps_kept``
integers, ``warnings`` texts, ``source`` one of the timeline sources).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import invalid
from core.settings import count, is_int, is_real
from core.timeline_meta import Source

INT_COLS = ("rank", "step", "stage", "chunk", "microbatch", "layer")
CODE_COLS = ("lane", "kind", "name")
TIME_COLS = ("start_ns_delta", "dur_ns")
COLUMNS = (*INT_COLS, *CODE_COLS, *TIME_COLS, "bytes")


def check_stored(data: Any, format_tag: str) -> int:
    """Raise a one-line ValueError unless ``data`` is a well-formed stored timeline; the span count."""
    if not isinstance(data, dict):
        raise ValueError(f"not a {format_tag} file (expected a JSON object)")
    if data.get("format") != format_tag:
        raise ValueError(f"not a {format_tag} file (format={data.get('format')!r})")
    for key in ("columns", "vocab", "meta"):
        if not isinstance(data.get(key), dict):
            raise invalid(key, data.get(key), "expected an object")
    n = _columns(data["columns"], data["vocab"])
    _meta(data["meta"])
    return n


def _columns(cols: dict[str, Any], vocab: dict[str, Any]) -> int:
    lengths = {}
    for c in COLUMNS:
        if not isinstance(cols.get(c), list):
            raise invalid(f"columns.{c}", cols.get(c), "expected a list (one entry per span)")
        lengths[c] = len(cols[c])
    n = lengths["start_ns_delta"]
    for c, length in lengths.items():
        if length != n:
            raise invalid(f"columns.{c}", f"{length} entries", f"expected {n}, as columns.start_ns_delta")
    for c in (*INT_COLS, *CODE_COLS, *TIME_COLS):
        values = _integers(f"columns.{c}", cols[c])
        if c == "dur_ns" and values.size and values.min() < 0:
            raise invalid(f"columns.{c}[{int(np.argmin(values))}]", int(values.min()), "expected a duration >= 0")
        if c in CODE_COLS:
            words = vocab.get(c)
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise invalid(f"vocab.{c}", words, "expected a list of texts")
            if values.size and (values.min() < 0 or values.max() >= len(words)):
                i = int(np.argmax((values < 0) | (values >= len(words))))
                raise invalid(f"columns.{c}[{i}]", int(values[i]), f"expected a code in [0, {len(words)}) of vocab.{c}")
    bad = next((i for i, b in enumerate(cols["bytes"]) if not (is_real(b) and b >= 0)), None)
    if bad is not None:
        raise invalid(f"columns.bytes[{bad}]", cols["bytes"][bad], "expected a number of bytes >= 0")
    return n


def _integers(key: str, values: list[Any]) -> np.ndarray:
    """``values`` as int64; a non-integer (a float, a text, null, a nested list, one beyond int64)
    names its index (numpy converts the list at C speed; the index is looked for only on failure)."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):  # ragged nesting
        array = np.asarray(values, dtype=object)
    if array.ndim == 1 and (array.dtype.kind == "i" or (array.size == 0)):
        return array.astype(np.int64, copy=False)
    for i, v in enumerate(values):
        if not is_int(v) or not -(2**63) <= v < 2**63:
            raise invalid(f"{key}[{i}]", v, "expected an integer")
    raise invalid(key, values, "expected a list of integers")


def _meta(meta: dict[str, Any]) -> None:
    if meta.get("world_size") is not None:
        count(1).check("meta.world_size", meta["world_size"])
    if "source" in meta and (not isinstance(meta["source"], str) or meta["source"] not in {s.value for s in Source}):
        raise invalid("meta.source", meta["source"], "expected one of " + ", ".join(s.value for s in Source))
    for key in ("steps_kept", "profiler_steps_kept"):
        if key in meta:
            _int_list(f"meta.{key}", meta[key])
    warnings = meta.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise invalid("meta.warnings", warnings, "expected a list of texts")
    rank_pp = meta.get("rank_pp", {})
    if not isinstance(rank_pp, dict) or not all(
            isinstance(r, str) and r.isdigit() and is_int(p) and p >= 0
            for r, p in rank_pp.items()):
        raise invalid("meta.rank_pp", rank_pp, "expected an object of rank -> pipeline rank (integers >= 0)")
    windows = meta.get("step_windows", [])
    if not isinstance(windows, list):
        raise invalid("meta.step_windows", windows, "expected a list of [rank, step, start_s, end_s]")
    for i, w in enumerate(windows):
        if not _window(w):
            raise invalid(f"meta.step_windows[{i}]", w, "expected [rank, step, start_s, end_s] with start_s <= end_s")


def _int_list(key: str, values: Any) -> None:
    if not isinstance(values, list):
        raise invalid(key, values, "expected a list of integers")
    _integers(key, values)


def _window(w: Any) -> bool:
    if not isinstance(w, list) or len(w) != 4:
        return False
    rank, step, start, end = w
    ints = all(is_int(x) and x >= 0 for x in (rank, step))
    times = all(is_real(x) for x in (start, end))
    return ints and times and start <= end
