"""Compact storage of a measured Timeline: one gzipped columnar JSON file (``timeline.json.gz``).

Raw Kineto traces of CPU runs hold every aten op with its shapes (~100 bytes per op gzipped);
validation only needs the parsed Timeline. This file keeps every span (times in integer
nanoseconds, starts delta-encoded per file, strings as codes into a vocabulary) plus the meta the
metrics read (pipeline rank of each rank, per-rank step windows), about ten times smaller. Reading
it back gives the same Timeline up to 1 ns rounding, so every metric is unchanged.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from core.timeline_meta import Source, TimelineMeta
from profiler.validate.store_check import CODE_COLS, INT_COLS, check_stored
from sim.atomic import write_bytes_atomic
from sim.timeline import Timeline, timeline_from_columns

FILE_NAME = "timeline.json.gz"
FORMAT = "trainsim-timeline/1"
META_KEYS = ("source", "world_size", "backend", "device_kind", "steps_kept", "profiler_steps_kept",
             "warnings")


def _codes(values: Any) -> tuple[list[str], list[int]]:
    vocab: dict[str, int] = {}
    codes = [vocab.setdefault(str(v), len(vocab)) for v in values]
    return list(vocab), codes


def timeline_to_json(tl: Timeline) -> dict[str, Any]:
    """The Timeline as a JSON-ready dict (see the module docstring)."""
    df = tl.spans
    start = np.rint(df["start_s"].to_numpy() * 1e9).astype(np.int64)
    dur = np.rint((df["end_s"] - df["start_s"]).to_numpy() * 1e9).astype(np.int64)
    cols: dict[str, Any] = {c: df[c].to_numpy().astype(np.int64).tolist() for c in INT_COLS}
    vocab = {}
    for c in CODE_COLS:
        vocab[c], cols[c] = _codes(df[c].astype(str))
    cols["start_ns_delta"] = np.diff(start, prepend=0).tolist()
    cols["dur_ns"] = dur.tolist()
    cols["bytes"] = [int(b) if float(b).is_integer() else float(b) for b in df["bytes"]]
    meta = {k: v for k in META_KEYS if (v := _plain(getattr(tl.meta, k))) is not None}
    meta["rank_pp"] = {str(r): int(p) for r, p in tl.meta.rank_pp.items()}
    meta["step_windows"] = [[int(r), int(s), round(float(a), 9), round(float(b), 9)]
                            for r, s, a, b in tl.meta.step_windows or ()]
    return {"format": FORMAT, "meta": meta, "vocab": vocab, "columns": cols}


def timeline_from_json(data: dict[str, Any]) -> Timeline:
    """Inverse of :func:`timeline_to_json`."""
    check_stored(data, FORMAT)
    cols, vocab = data["columns"], data["vocab"]
    start = np.cumsum(np.asarray(cols["start_ns_delta"], dtype=np.int64))
    out: dict[str, Any] = {c: cols[c] for c in INT_COLS}
    for c in CODE_COLS:
        words = np.asarray(vocab[c], dtype=object)
        out[c] = words[np.asarray(cols[c], dtype=np.int64)] if len(cols[c]) else []
    out["start_s"] = start / 1e9
    out["end_s"] = (start + np.asarray(cols["dur_ns"], dtype=np.int64)) / 1e9
    out["bytes"] = cols["bytes"]
    out["flops"] = np.zeros(len(start))
    out["group"] = [""] * len(start)
    return timeline_from_columns(out, _meta(data["meta"]))


def _plain(value: Any) -> Any:
    """A meta value as JSON writes it: tuples as lists, the source as its name."""
    return list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Source) else value


def _meta(data: dict[str, Any]) -> TimelineMeta:
    """The stored meta (:data:`META_KEYS`, ``rank_pp``, ``step_windows``) as a TimelineMeta."""
    def ints(key: str) -> tuple[int, ...] | None:
        return tuple(data[key]) if key in data else None

    windows = tuple((int(r), int(s), float(a), float(b)) for r, s, a, b in data.get("step_windows", []))
    return TimelineMeta(source=Source(data["source"]) if "source" in data else None, world_size=data.get("world_size"),
                        backend=data.get("backend"), device_kind=data.get("device_kind"), steps_kept=ints("steps_kept"),
                        profiler_steps_kept=ints("profiler_steps_kept"), warnings=tuple(data.get("warnings", ())),
                        rank_pp={int(r): int(p) for r, p in data.get("rank_pp", {}).items()},
                        step_windows=windows if "step_windows" in data else None)


def write_timeline(tl: Timeline, directory: str | Path) -> Path:
    """Write ``directory/timeline.json.gz`` (deterministic bytes: no gzip timestamp)."""
    text = json.dumps(timeline_to_json(tl), separators=(",", ":"), sort_keys=True)
    buf = io.BytesIO()
    with gzip.GzipFile(filename=FILE_NAME, mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(text.encode())  # the header names timeline.json, as when written straight to the file
    return write_bytes_atomic(Path(directory) / FILE_NAME, buf.getvalue())


def read_timeline(directory: str | Path) -> Timeline:
    """Read ``directory/timeline.json.gz``; ValueError (one line) if it is not one."""
    path = Path(directory) / FILE_NAME
    try:
        with gzip.open(path, "rt") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read a stored timeline: {exc}") from None
    try:
        return timeline_from_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
