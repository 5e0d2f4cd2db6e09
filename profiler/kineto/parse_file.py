"""Parse one trace file into :class:`TraceColumns`, in this process or with a process pool.

The reader (``reader.py``) cuts the traceEvents array at its true top-level commas, so every
piece is valid on its own. Serial: each piece is parsed (orjson) and collected here, in file
order. Pooled: each piece's text goes to a worker that parses and collects it and returns
compact columns; at most ``inflight`` pieces are in flight, merged in file order. A piece a
worker cannot parse is parsed again here only to raise the positioned error.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np

from profiler.kineto.columns import BatchColumns, TraceColumns, collect, collect_text
from profiler.kineto.malformed import Malformed, merge
from profiler.kineto.reader import BATCH_BYTES, NotATraceError, Piece, TraceReader
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


def _pooled(reader: TraceReader, merger: _Merger, pool: Executor, inflight: int) -> None:
    pending: deque[tuple[Piece, Future[BatchColumns | None]]] = deque()

    def resolve(piece: Piece, fut: Future[BatchColumns | None]) -> None:
        res = fut.result()
        if res is None:  # not valid JSON: parse here for the positioned error
            reader.parse(piece)
            raise reader.fail("corrupt JSON")
        merger.add(res)

    for piece in reader.pieces():
        if piece.start == 0:  # the first piece: parsed here (it also checks for a leading comma)
            while pending:
                resolve(*pending.popleft())
            merger.add(collect(reader.parse(piece), 0))
            continue
        pending.append((piece, pool.submit(collect_text, piece.text, piece.start)))
        while len(pending) > inflight:
            resolve(*pending.popleft())
    while pending:
        resolve(*pending.popleft())


def read_columns(path: Path, batch_bytes: int = BATCH_BYTES, pool: Executor | None = None,
                 inflight: int = 4) -> TraceColumns:
    """Read one trace file (plain or gzipped JSON) into columns (see the module docstring)."""
    path = Path(path)
    reader = TraceReader(path, batch_bytes)
    merger = _Merger()
    try:
        with gc_paused():
            if pool is None:
                for piece in reader.pieces():
                    merger.add(collect(reader.parse(piece), piece.start))
            else:
                _pooled(reader, merger, pool, inflight)
    except NotATraceError:
        raise
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(path.name) else f"{path.name}: {msg}") from None
    return merger.finish(path, reader.header, reader.nbytes)
