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
    """Consumes event batches into compact arrays (see module docstring)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_code: dict[str, int] = {}
        self.keep_args: list[bool] = []
        self.str_code: dict[Any, int] = {}
        self.cols: dict[str, array[Any]] = {"cat": array("b"), "name": array("i"), "pid": array("q"), "tid": array("q"),
                     "ts": array("d"), "dur": array("d"), "corr": array("q"),
                     "nbytes_moved": array("d")}
        self.args: dict[int, dict[str, Any]] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.skipped: dict[str, int] = {}

    def intern(self, name: str) -> int:
        code = len(self.names)
        self.names.append(name)
        self.name_code[name] = code
        self.keep_args.append(is_comm_range_name(name) or is_nccl_kernel(name))
        return code

    def ident(self, value: Any) -> int:
        """A pid/tid as an int: integral floats as themselves, others ("Spans") a negative code."""
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return self.str_code.setdefault(value, -1000 - len(self.str_code))

    def __call__(self, events: list[dict[str, Any]]) -> None:
        c = self.cols
        cat_a, name_a, pid_a, tid_a = c["cat"].append, c["name"].append, c["pid"].append, c["tid"].append
        ts_a, dur_a, corr_a, nb_a = c["ts"].append, c["dur"].append, c["corr"].append, c["nbytes_moved"].append
        name_code, keep_args, skipped = self.name_code, self.keep_args, self.skipped
        n = len(c["ts"])
        for e in events:
            ph = e.get("ph")
            if ph != "X":
                if ph == "M" and e.get("name") == "thread_name":
                    self._thread_name(e)
                continue
            cat = e.get("cat")
            cc = _CAT_CODE.get(cat)  # type: ignore[arg-type]
            if cc is None:
                skipped[str(cat)] = skipped.get(str(cat), 0) + 1
                continue
            name = e.get("name", "")
            k = name_code.get(name)
            if k is None:
                k = self.intern(str(name))
            args = e.get("args") or {}
            try:  # fast path: numbers as numbers (array.append rejects anything else)
                pid_a(e.get("pid", -1))
                tid_a(e.get("tid", -1))
                ts_a(e.get("ts", 0.0))
                dur_a(e.get("dur", 0.0))
                corr_a(args.get("correlation", -1))
                nb_a(args.get("bytes", 0) if cc >= GPU_MEMCPY else 0)
            except TypeError:
                self._append_coerced(n, e, args, cc)
            cat_a(cc)
            name_a(k)
            if keep_args[k]:
                self.args[n] = args
            n += 1

    def _append_coerced(self, n: int, e: dict[str, Any], args: dict[str, Any], cc: int) -> None:
        """Slow path for event n: string pids/tids get codes, numeric strings are converted."""
        c = self.cols
        for key in ("pid", "tid", "ts", "dur", "corr", "nbytes_moved"):
            del c[key][n:]
        pid, tid = e.get("pid", -1), e.get("tid", -1)
        ts, dur, corr = e.get("ts", 0.0), e.get("dur", 0.0), args.get("correlation", -1)
        try:
            c["pid"].append(self.ident(pid))
            c["tid"].append(self.ident(tid))
            c["ts"].append(float(ts))
            c["dur"].append(float(dur or 0.0))
            c["corr"].append(int(corr) if corr is not None else -1)
            c["nbytes_moved"].append(float(args.get("bytes", 0) or 0) if cc >= GPU_MEMCPY else 0.0)
        except (TypeError, ValueError):
            raise ValueError(f"event with non-numeric ts/dur/correlation: ts={ts!r} dur={dur!r}") from None

    def _thread_name(self, e: dict[str, Any]) -> None:
        pid, tid = e.get("pid"), e.get("tid")
        if type(pid) is int and type(tid) is int:
            self.thread_names[(pid, tid)] = str((e.get("args") or {}).get("name", ""))

    def result(self) -> BatchColumns:
        """What was collected, as arrays (codes local to this collector)."""
        dtypes: dict[str, type] = {"cat": np.int8, "name": np.int32, "pid": np.int64,
                                   "tid": np.int64, "ts": np.float64, "dur": np.float64,
                                   "corr": np.int64, "nbytes_moved": np.float64}
        arrays: dict[str, npt.NDArray[Any]] = {}
        for k, v in self.cols.items():
            arrays[k] = np.frombuffer(v, dtype=dtypes[k]) if len(v) else np.empty(0, dtypes[k])
        return BatchColumns(arrays=arrays, names=self.names, args=self.args,
                            thread_names=self.thread_names, skipped=self.skipped,
                            str_code=self.str_code)


@dataclass
class BatchColumns:
    """Columns of one batch of events; name codes and string pid/tid codes are batch-local."""

    arrays: dict[str, npt.NDArray[Any]]
    names: list[str]
    args: dict[int, dict[str, Any]]
    thread_names: dict[tuple[int, int], str]
    skipped: dict[str, int]
    str_code: dict[Any, int]


def collect(events: list[dict[str, Any]]) -> BatchColumns:
    """Columns of a list of event dicts."""
    col = _Collector()
    col(events)
    return col.result()


def collect_text(content: bytes) -> BatchColumns | None:
    """Columns of events text ``{...}, {...}`` (a slice of the traceEvents array).

    None when the text is not a valid sequence of events (the cut that produced it fell inside a
    string or a nested value). Runs in worker processes.
    """
    with gc_paused():
        try:
            events = orjson.loads(b"[" + content + b"]")
        except orjson.JSONDecodeError:
            return None
        return collect(events) if isinstance(events, list) else None
