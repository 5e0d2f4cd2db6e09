"""Parse one trace file into :class:`TraceColumns`, in this process or with a process pool.

Serial: the stream's verified batches are collected one after the other.

Pooled: the main process only cuts the byte stream (regex, no parsing) and hands each batch's
text to a worker, which parses it (orjson) and returns compact columns. A cut is only a
candidate (``}, {`` may sit inside a string); batches are merged in file order, and a batch
that is not valid JSON is joined with the next one and parsed here, so a wrong cut costs time,
never correctness: a batch that parses and starts at a true boundary ends at one too. At most
``inflight`` batches (a few MB each) are in flight.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np

from profiler.kineto.columns import BatchColumns, TraceColumns, collect, collect_text
from profiler.kineto.malformed import Malformed, merge
from profiler.kineto.reader import BATCH_BYTES, NotATraceError, TraceStream, split_rest
from sim.gc_pause import gc_paused


class _Merger:
    """Appends batches, remapping their local name and string-id codes to file-wide ones."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_code: dict[str, int] = {}
        self.str_code: dict[Any, int] = {}
        self.parts: list[dict[str, np.ndarray]] = []
        self.args: dict[int, dict[str, Any]] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.skipped: dict[str, int] = {}
        self.malformed: Malformed = {}
        self.count = 0
        self.entries = 0

    def _code(self, name: str) -> int:
        code = self.name_code.get(name)
        if code is None:
            code = self.name_code[name] = len(self.names)
            self.names.append(name)
        return code

    def _ids(self, ids: np.ndarray, local: dict[Any, int]) -> np.ndarray:
        if not local:
            return ids
        out = ids.copy()
        for value, code in local.items():  # masks on the original ids: codes may swap
            out[ids == code] = self.str_code.setdefault(value, -1000 - len(self.str_code))
        return out

    def add(self, b: BatchColumns) -> None:
        a = dict(b.arrays)
        codes = np.fromiter((self._code(n) for n in b.names), np.int32, len(b.names))
        a["name"] = codes[a["name"]] if a["name"].size else a["name"]
        a["pid"], a["tid"] = self._ids(a["pid"], b.str_code), self._ids(a["tid"], b.str_code)
        self.parts.append(a)
        self.args.update({self.count + i: v for i, v in b.args.items()})
        self.thread_names.update(b.thread_names)
        for cat, n in b.skipped.items():
            self.skipped[cat] = self.skipped.get(cat, 0) + n
        merge(self.malformed, b.malformed, self.entries)
        self.entries += b.entries
        self.count += int(a["ts"].size)

    def finish(self, path: Path, header: dict[str, Any], nbytes: int) -> TraceColumns:
        cols = {k: np.concatenate([p[k] for p in self.parts]) if self.parts else
                collect([]).arrays[k] for k in collect([]).arrays}
        return TraceColumns(path=path, header=header, nbytes=nbytes, names=self.names,
                            args=self.args, thread_names=self.thread_names, skipped=self.skipped,
                            malformed=self.malformed, **cols)


def _pooled(stream: TraceStream, merger: _Merger, pool: Executor, inflight: int) -> None:
    pending: deque[tuple[bytes, bytes, Future[BatchColumns | None]]] = deque()
    carry: bytes | None = None  # text of batches that did not parse on their own

    def resolve(content: bytes, sep: bytes, fut: Future[BatchColumns | None]) -> bytes | None:
        if carry is None:
            res = fut.result()
            if res is not None:
                merger.add(res)
                return None
            return content + sep
        fut.cancel()
        merged = carry + content
        res = collect_text(merged)
        if res is None:
            return merged + sep
        merger.add(res)
        return None

    for kind, payload, sep in stream.raw_batches():
        if kind == "raw":
            pending.append((payload, sep, pool.submit(collect_text, payload)))
            while len(pending) > inflight:
                carry = resolve(*pending.popleft())
        elif kind == "events":
            merger.add(collect(payload))
        else:
            while pending:
                carry = resolve(*pending.popleft())
            rest = payload if carry is None else bytearray(b" ") + carry + payload[1:]
            found = split_rest(rest, 1)
            if found is None:
                raise stream.fail("truncated or corrupt JSON (no complete traceEvents array)")
            merger.add(collect(found[0]))
            stream.header.update(found[1])


def read_columns(path: Path, batch_bytes: int = BATCH_BYTES, pool: Executor | None = None,
                 inflight: int = 4) -> TraceColumns:
    """Read one trace file (plain or gzipped JSON) into columns (see the module docstring)."""
    path = Path(path)
    stream = TraceStream(path, batch_bytes)
    merger = _Merger()
    try:
        with gc_paused():
            if pool is None:
                for events in stream.batches():
                    merger.add(collect(events))
            else:
                _pooled(stream, merger, pool, inflight)
    except NotATraceError:
        raise
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(path.name) else f"{path.name}: {msg}") from None
    return merger.finish(path, stream.header, stream.nbytes)
