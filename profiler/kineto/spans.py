"""Columnar spans of one rank before the run is assembled (times still in file µs).

A ``SpanCols`` is a dict of equal-length numpy arrays with the fields below: the Timeline
columns (with ``pstep`` = ProfilerStep number instead of the final step label) plus the raw
facts replay needs (device, stream, correlation, launch time and thread, process group, the
collective's sequence number within its group, the source event category, and ``row``, the
event's index among the kept events of its file).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

SpanCols = dict[str, npt.NDArray[Any]]

FIELDS: dict[str, tuple[type, Any]] = {
    "lane": (object, "compute"), "kind": (object, "other"), "name": (object, ""),
    "start_us": (np.float64, 0.0), "end_us": (np.float64, 0.0), "pstep": (np.int64, -1),
    "stage": (np.int64, -1), "chunk": (np.int64, -1), "microbatch": (np.int64, -1),
    "layer": (np.int64, -1), "bytes": (np.float64, 0.0), "pg": (object, ""),
    "pg_ranks": (object, ""), "seq": (np.int64, -1), "device": (np.int64, -1),
    "stream": (np.int64, -1), "correlation": (np.int64, -1), "launch_us": (np.float64, np.nan),
    "launch_tid": (np.int64, -1), "source": (object, ""), "row": (np.int64, -1),
}


def make_spans(n: int, **cols: Any) -> SpanCols:
    """``n`` spans; given columns are broadcast/converted, the rest take their defaults."""
    unknown = set(cols) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown span fields: {sorted(unknown)}; valid: {sorted(FIELDS)}")
    out: SpanCols = {}
    for key, (dtype, default) in FIELDS.items():
        value = cols.get(key, default)
        arr: npt.NDArray[Any] = np.empty(n, dtype=dtype)
        arr[:] = value
        out[key] = arr
    return out


def concat_spans(parts: list[SpanCols]) -> SpanCols:
    """Concatenate span tables field by field."""
    parts = [p for p in parts if p["start_us"].size]
    if not parts:
        return make_spans(0)
    return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}


def take(spans: SpanCols, index: npt.NDArray[Any]) -> SpanCols:
    """Rows ``index`` (a mask or integer index) of every field."""
    return {k: v[index] for k, v in spans.items()}


def number_collectives(spans: SpanCols, order_key: npt.NDArray[np.float64]) -> None:
    """Fill ``seq``: per process group, the 0-based order of its collectives on this rank.

    Only spans whose ``source`` marks a collective instance (a NCCL kernel, a gloo call) are
    numbered, in ``order_key`` order (the CPU launch/call time).
    """
    is_coll = np.isin(spans["source"], ["nccl_kernel", "gloo_call"])
    groups = spans["pg"]
    for pg in np.unique(groups[is_coll]):
        rows = np.flatnonzero(is_coll & (groups == pg))
        rows = rows[np.argsort(order_key[rows], kind="stable")]
        spans["seq"][rows] = np.arange(rows.size)
