"""Builders of small synthetic Kineto traces for the kineto/hta tests (plus checks of the builders).

The layout copies what real traces contain (see ../shared/traces-external/FORMAT-NOTES.md):
metadata events, a "Trace" span with pid "Spans", instants with string pids, flows, float ts
relative to baseTimeNanoseconds (new format) or absolute int ts (old format).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

CPU_PID = 4000
MAIN_TID = 4000
BWD_TID = 4100


class TraceBuilder:
    """Collects events of one rank; times are µs relative to the trace start."""

    def __init__(self, rank: int | None, world_size: int | None = 2, *, new_format: bool = True,
                 base_ns: int = 1_700_000_000_000_000_000, backend: str = "nccl",
                 origin_us: float | None = None) -> None:
        self.rank, self.world_size, self.new_format = rank, world_size, new_format
        self.base_ns = base_ns if new_format else 0
        self.backend = backend
        # new format: ts relative to base (a large float); old format: absolute unix µs (int)
        self.origin = origin_us if origin_us is not None else (4.0e12 if new_format else 1_694_128_201_000_000)
        self.events: list[dict[str, Any]] = []
        self.corr = 100
        self.extra: dict[str, Any] = {}

    def _t(self, t: float) -> float | int:
        return self.origin + t if self.new_format else int(self.origin + t)

    def x(self, cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any,
          args: dict[str, Any] | None = None) -> dict[str, Any]:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self._t(ts),
              "dur": float(dur) if self.new_format else int(dur), "args": dict(args or {})}
        self.events.append(ev)
        return ev

    def op(self, name: str, ts: float, dur: float, tid: int = MAIN_TID, **args: Any) -> dict[str, Any]:
        return self.x("cpu_op", name, ts, dur, CPU_PID, tid, args)

    def ann(self, name: str, ts: float, dur: float, tid: int = MAIN_TID, **args: Any) -> dict[str, Any]:
        return self.x("user_annotation", name, ts, dur, CPU_PID, tid, args)

    def step(self, n: int, ts: float, dur: float) -> dict[str, Any]:
        return self.ann(f"ProfilerStep#{n}", ts, dur)

    def launch(self, ts: float, tid: int = MAIN_TID, name: str = "cudaLaunchKernel",
               cat: str = "cuda_runtime") -> int:
        self.corr += 1
        self.x(cat, name, ts, 3, CPU_PID, tid, {"correlation": self.corr, "External id": self.corr})
        return self.corr

    def kernel(self, name: str, ts: float, dur: float, corr: int, stream: int = 7, device: int = 0,
               cat: str = "kernel", **args: Any) -> dict[str, Any]:
        a = {"device": device, "stream": stream, "correlation": corr, "External id": corr + 7}
        a.update(args)
        ev = self.x(cat, name, ts, dur, device, stream, a)
        # a flow event pair like real traces (never needed by the parser)
        self.events.append({"ph": "f", "cat": "ac2g", "id": corr, "pid": device, "tid": stream,
                            "ts": ev["ts"], "bp": "e", "name": "ac2g"})
        return ev

    def launched_kernel(self, name: str, launch_ts: float, ts: float, dur: float, tid: int = MAIN_TID,
                        **kw: Any) -> dict[str, Any]:
        return self.kernel(name, ts, dur, self.launch(launch_ts, tid), **kw)

    def doc(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.backend}
        if self.rank is not None:
            info["rank"] = self.rank
        if self.world_size is not None:
            info["world_size"] = self.world_size
        meta = [
            {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "ts": self._t(0), "args": {"name": "python3"}},
            {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": MAIN_TID, "ts": self._t(0),
             "args": {"name": f"thread {MAIN_TID} (python3)"}},
            {"ph": "M", "name": "process_sort_index", "pid": "Spans", "tid": 0, "ts": self._t(0), "args": {"sort_index": 1}},
        ]
        tail = [
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": self._t(-10), "dur": 1e9, "args": {"Op count": 0}},
            {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
             "tid": "Trace PyTorch Profiler", "ts": self._t(0)},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": self._t(1e6)},
        ]
        doc: dict[str, Any] = {"schemaVersion": 1, "distributedInfo": info, "record_shapes": 1}
        if self.new_format:
            doc["displayTimeUnit"] = "ms"
        doc["traceEvents"] = meta + self.events + tail
        doc["traceName"] = f"rank{self.rank}.json"
        if self.new_format:
            doc["baseTimeNanoseconds"] = self.base_ns  # new traces put it after the array
        doc.update(self.extra)
        return doc

    def write(self, path: Path, *, gz: bool = False, pretty: bool = False) -> Path:
        data = orjson.dumps(self.doc(), option=orjson.OPT_INDENT_2 if pretty else 0)
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


def nccl_args(coll: str, nelems: int, dtype: str, pg: str, ranks: str) -> dict[str, Any]:
    """Collective metadata as new traces put it on NCCL kernels and record_param_comms."""
    return {"Collective name": coll, "In msg nelems": nelems, "Out msg nelems": nelems,
            "Group size": len(ranks.split(",")), "dtype": dtype, "In split size": "[]",
            "Out split size": "[]", "Process Group Name": pg, "Process Group Description": "undefined",
            "Process Group Ranks": ranks}


def test_builder_writes_valid_traces(tmp_path: Path) -> None:
    b = TraceBuilder(0)
    b.step(1, 0, 100)
    b.launched_kernel("k", 10, 20, 5)
    doc = orjson.loads(b.write(tmp_path / "r.json").read_bytes())
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 0, "world_size": 2}
    assert [e["ph"] for e in doc["traceEvents"]].count("X") == 4  # step, launch, kernel, Trace span
    gz = b.write(tmp_path / "r.json.gz", gz=True)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
