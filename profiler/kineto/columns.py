"""One trace file as columns: the complete ("X") events we use, as numpy arrays.

Only categories that matter for a Timeline are kept: CPU ops, user annotations, CUDA runtime and
driver calls (the launch side of the correlation link), kernels, memcpy and memset. Everything
else — ``gpu_user_annotation`` (GPU copies of record_function ranges, not kernels), ``cuda_sync``,
``python_function``, ``Trace`` spans, flows, instants — is counted in ``skipped`` and dropped.
Names are interned (an int code per event), and only the ``args`` of collective-related events
are kept as dicts, so memory stays a few tens of bytes per event.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from profiler.kineto.malformed import INT64_MAX, MAX_TIME_US, Malformed, Skip, note
from profiler.kineto.names import is_comm_range_name, is_nccl_kernel
from sim.gc_pause import gc_paused

CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
              "gpu_memset")
CPU_OP, USER_ANNOTATION, CUDA_RUNTIME, CUDA_DRIVER, KERNEL, GPU_MEMCPY, GPU_MEMSET = range(7)
GPU_CATEGORIES = (KERNEL, GPU_MEMCPY, GPU_MEMSET)
_CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}


@dataclass
class TraceColumns:
    """The kept events of one trace file. Times are µs exactly as in the file (no base added).

    ``args`` maps event index -> args dict for NCCL kernels and collective CPU ranges
    (``c10d::*``, ``record_param_comms``, ``nccl:*``, ``gloo:*``). ``pid``/``tid`` that were
    strings in the file get negative codes.
    """

    path: Path
    header: dict[str, Any]
    nbytes: int
    names: list[str]
    cat: npt.NDArray[np.int8]
    name: npt.NDArray[np.int32]
    pid: npt.NDArray[np.int64]
    tid: npt.NDArray[np.int64]
    ts: npt.NDArray[np.float64]
    dur: npt.NDArray[np.float64]
    corr: npt.NDArray[np.int64]
    nbytes_moved: npt.NDArray[np.float64]
    args: dict[int, dict[str, Any]] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    malformed: Malformed = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ts.size)

    @property
    def end(self) -> npt.NDArray[np.float64]:
        """End time of each event, µs."""
        return self.ts + self.dur

    @property
    def base_ns(self) -> int:
        """``baseTimeNanoseconds`` (new traces: ts is relative to it), 0 when absent."""
        base = self.header.get("baseTimeNanoseconds", 0)
        return int(base) if isinstance(base, (int, float)) else 0

    def name_of(self, i: int) -> str:
        """Name of event i."""
        return self.names[int(self.name[i])]


class _Collector:
    """Consumes event batches into compact arrays (see module docstring).

    Malformed events are skipped and counted (policy in ``malformed.py``): the loop appends
    numbers straight into typed arrays and takes a checked slow path only when an append fails;
    the ranges of ts and dur are then checked on whole columns in :meth:`result`.
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_code: dict[Any, int] = {}
        self.keep_args: list[bool] = []
        self.str_code: dict[Any, int] = {}
        self.cols: dict[str, array[Any]] = {"cat": array("b"), "name": array("i"), "pid": array("q"), "tid": array("q"),
                     "ts": array("d"), "dur": array("d"), "corr": array("q"),
                     "nbytes_moved": array("d")}
        self.index: array[int] = array("q")
        self.args: dict[int, dict[str, Any]] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.skipped: dict[str, int] = {}
        self.malformed: Malformed = {}
        self.entries = 0

    def intern(self, key: Any) -> int:
        code = len(self.names)
        name = str(key)
        self.names.append(name)
        self.name_code[key] = code
        self.keep_args.append(is_comm_range_name(name) or is_nccl_kernel(name))
        return code

    def ident(self, value: Any) -> int | None:
        """A pid/tid as an int: integral floats as themselves, others ("Spans") a negative code.

        None for lists, objects and integers beyond int64.
        """
        if isinstance(value, int):
            return int(value) if -INT64_MAX <= value <= INT64_MAX else None
        if isinstance(value, float) and value.is_integer():
            return int(value) if abs(value) <= 2.0 ** 62 else None
        if isinstance(value, (list, dict)):
            return None
        return self.str_code.setdefault(value, -1000 - len(self.str_code))

    def __call__(self, events: list[Any], start: int = 0) -> None:
        """Collect ``events[start:]`` (entries before ``start`` are not part of the trace)."""
        c = self.cols
        cat_a, name_a, pid_a, tid_a = c["cat"].append, c["name"].append, c["pid"].append, c["tid"].append
        ts_a, dur_a, corr_a, nb_a = c["ts"].append, c["dur"].append, c["corr"].append, c["nbytes_moved"].append
        idx_a = self.index.append
        name_code, keep_args, skipped = self.name_code, self.keep_args, self.skipped
        n = len(c["ts"])
        i = self.entries - 1
        for j in range(start, len(events)):
            e = events[j]
            i += 1
            if type(e) is not dict:
                note(self.malformed, Skip.ENTRY_NOT_OBJECT, i, e)
                continue
            ph = e.get("ph")
            if ph != "X":
                if ph == "M" and e.get("name") == "thread_name":
                    self._thread_name(e)
                continue
            cat = e.get("cat")
            try:
                cc = _CAT_CODE.get(cat)  # type: ignore[arg-type]
            except TypeError:
                note(self.malformed, Skip.CAT_NOT_STRING, i, cat)
                continue
            if cc is None:
                skipped[str(cat)] = skipped.get(str(cat), 0) + 1
                continue
            name = e.get("name", "")
            try:
                k = name_code.get(name)
            except TypeError:
                note(self.malformed, Skip.NAME_NOT_STRING, i, name)
                continue
            if k is None:
                k = self.intern(name)
            args = e.get("args")
            if type(args) is not dict:
                if args is not None:
                    note(self.malformed, Skip.ARGS_NOT_OBJECT, i, args)
                args = {}
            try:  # fast path: numbers as numbers (array.append rejects anything else)
                pid_a(e.get("pid", -1))
                tid_a(e.get("tid", -1))
                ts_a(e["ts"])
                dur_a(e["dur"])
                corr_a(args.get("correlation", -1))
                nb_a(args.get("bytes", 0) if cc >= GPU_MEMCPY else 0)
            except (TypeError, KeyError, OverflowError):
                if not self._append_checked(n, i, e, args, cc):
                    continue
            cat_a(cc)
            name_a(k)
            idx_a(i)
            if keep_args[k]:
                self.args[n] = args
            n += 1
        self.entries = i + 1

    def _append_checked(self, n: int, i: int, e: dict[str, Any], args: dict[str, Any], cc: int) -> bool:
        """Slow path for event n (entry i): checked conversions; False if the event is skipped."""
        c = self.cols
        for key in ("pid", "tid", "ts", "dur", "corr", "nbytes_moved"):
            del c[key][n:]
        pid, tid = self.ident(e.get("pid", -1)), self.ident(e.get("tid", -1))
        if pid is None or tid is None:
            note(self.malformed, Skip.ID_INVALID, i, e.get("pid") if pid is None else e.get("tid"))
            return False
        ts = _number(e.get("ts"))
        if ts is None:
            note(self.malformed, Skip.TS_NOT_NUMBER, i, e.get("ts"))
            return False
        raw_dur = e.get("dur")
        if raw_dur is None:
            note(self.malformed, Skip.DUR_MISSING, i, raw_dur)
            return False
        dur = _number(raw_dur)
        if dur is None:
            note(self.malformed, Skip.DUR_NOT_NUMBER, i, raw_dur)
            return False
        corr = _integer(args.get("correlation", -1))
        if corr is None:
            note(self.malformed, Skip.CORRELATION_INVALID, i, args.get("correlation"))
            corr = -1
        nb = 0.0
        if cc >= GPU_MEMCPY:
            raw = args.get("bytes", 0)
            value = _number(raw if raw is not None else 0)
            if value is None or not (0.0 <= value <= MAX_TIME_US):
                note(self.malformed, Skip.BYTES_INVALID, i, raw)
                value = 0.0
            nb = value
        c["pid"].append(pid)
        c["tid"].append(tid)
        c["ts"].append(ts)
        c["dur"].append(dur)
        c["corr"].append(corr)
        c["nbytes_moved"].append(nb)
        return True

    def _thread_name(self, e: dict[str, Any]) -> None:
        pid, tid, args = e.get("pid"), e.get("tid"), e.get("args")
        if type(pid) is int and type(tid) is int and type(args) is dict:
            self.thread_names[(pid, tid)] = str(args.get("name", ""))

    def _range_checks(self, arrays: dict[str, npt.NDArray[Any]], index: npt.NDArray[np.int64]
                      ) -> tuple[dict[str, npt.NDArray[Any]], npt.NDArray[np.int64]]:
        """Drop events whose ts/dur are out of range (whole columns at once); count them."""
        ts, dur = arrays["ts"], arrays["dur"]
        with np.errstate(invalid="ignore"):
            bad_ts = ~(np.abs(ts) <= MAX_TIME_US)
            bad_neg = ~bad_ts & (dur < 0)
            bad_dur = ~bad_ts & ~bad_neg & ~(dur <= MAX_TIME_US)
            nb = arrays["nbytes_moved"]
            bad_nb = ~(nb >= 0) | ~(nb <= MAX_TIME_US)
        if bad_nb.any():
            for r in np.flatnonzero(bad_nb):
                note(self.malformed, Skip.BYTES_INVALID, int(index[r]), float(nb[r]))
            arrays["nbytes_moved"] = np.where(bad_nb, 0.0, nb)
        bad = bad_ts | bad_neg | bad_dur
        if not bad.any():
            return arrays, index
        for kind, mask, col in ((Skip.TS_OUT_OF_RANGE, bad_ts, ts), (Skip.DUR_NEGATIVE, bad_neg, dur),
                                (Skip.DUR_OUT_OF_RANGE, bad_dur, dur)):
            rows = np.flatnonzero(mask)
            if rows.size:
                note(self.malformed, kind, int(index[rows[0]]), float(col[rows[0]]), int(rows.size))
        keep = ~bad
        new_row = np.cumsum(keep) - 1
        self.args = {int(new_row[r]): a for r, a in self.args.items() if keep[r]}
        return {k: v[keep] for k, v in arrays.items()}, index[keep]

    def result(self) -> BatchColumns:
        """What was collected, as arrays (codes local to this collector)."""
        dtypes: dict[str, type] = {"cat": np.int8, "name": np.int32, "pid": np.int64,
                                   "tid": np.int64, "ts": np.float64, "dur": np.float64,
                                   "corr": np.int64, "nbytes_moved": np.float64}
        arrays: dict[str, npt.NDArray[Any]] = {}
        for k, v in self.cols.items():
            arrays[k] = np.frombuffer(v, dtype=dtypes[k]) if len(v) else np.empty(0, dtypes[k])
        index = np.frombuffer(self.index, dtype=np.int64) if len(self.index) else np.empty(0, np.int64)
        arrays, _ = self._range_checks(arrays, index)
        return BatchColumns(arrays=arrays, names=self.names, args=self.args,
                            thread_names=self.thread_names, skipped=self.skipped,
                            str_code=self.str_code, malformed=self.malformed, entries=self.entries)


def _number(value: Any) -> float | None:
    """A float from an int, float or numeric string; None otherwise (range checked later)."""
    if type(value) is bool or isinstance(value, (list, dict)) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _integer(value: Any) -> int | None:
    """An int64 from an int, integral float or integer string; None otherwise."""
    if value is None:
        return -1
    if type(value) is bool or isinstance(value, (list, dict)):
        return None
    try:
        out = int(value) if not isinstance(value, float) else (int(value) if value.is_integer() else None)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out is not None and -INT64_MAX <= out <= INT64_MAX else None


@dataclass
class BatchColumns:
    """Columns of one batch of events; name codes and string pid/tid codes are batch-local."""

    arrays: dict[str, npt.NDArray[Any]]
    names: list[str]
    args: dict[int, dict[str, Any]]
    thread_names: dict[tuple[int, int], str]
    skipped: dict[str, int]
    str_code: dict[Any, int]
    malformed: Malformed = field(default_factory=dict)
    entries: int = 0


def collect(events: list[Any], start: int = 0) -> BatchColumns:
    """Columns of ``events[start:]`` (a list of event dicts; other entries are counted skips)."""
    col = _Collector()
    col(events, start)
    return col.result()


def collect_text(text: bytes, start: int = 0) -> BatchColumns | None:
    """Columns of ``text``, a JSON array of trace entries (a reader piece), from entry ``start``.

    None when the text is not valid JSON (the caller raises the positioned error). Runs in
    worker processes.
    """
    with gc_paused():
        try:
            events = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return collect(events, start) if isinstance(events, list) else None
