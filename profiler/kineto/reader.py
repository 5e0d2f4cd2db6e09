"""Stream the events of one Kineto Chrome-trace file without holding it all as Python objects.

A trace is one JSON object ``{..., "traceEvents": [ev, ev, ...], ...}``; real ones reach 1 GB.
``orjson.loads`` of a whole file would build every event dict at once (several times the file
size). Instead the file is read in blocks (plain or gzip, sniffed by the magic bytes 1f 8b), the
``traceEvents`` array is cut at event boundaries into batches of a few MB, and each batch is parsed
by orjson on its own. A cut candidate is ``}`` ``,`` ``{`` (with optional whitespace); if it falls
inside a string or a nested value the batch is not valid JSON, so the next candidate is tried —
parse success proves the cut. The keys around the array form the header.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from profiler.kineto.source import Source

BLOCK_BYTES = 8 << 20
BATCH_BYTES = 4 << 20
_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT_RE = re.compile(rb"\}\s*,\s*\{")
_END_RE = re.compile(rb"\s*\}\s*\Z")
_WS_RE = re.compile(rb"\s+")


class NotATraceError(ValueError):
    """The file is JSON but has no ``traceEvents`` array (e.g. a manifest or config file)."""


def open_trace(path: Path) -> Iterator[bytes]:
    """Yield the uncompressed bytes of a trace file in blocks (gzip sniffed by magic bytes)."""
    yield from Source(path, BLOCK_BYTES)


class TraceStream:
    """Reads one trace: ``header`` (all top-level keys except traceEvents) and event batches.

    Iterate ``batches()`` once; ``header`` is complete only after iteration (keys may follow the
    array, e.g. ``baseTimeNanoseconds``). Batches are parsed in place from a bytearray: the byte
    before a batch is temporarily set to ``[`` and the byte after it to ``]``, so no batch is
    copied before orjson reads it.
    """

    def __init__(self, path: Path, batch_bytes: int = BATCH_BYTES) -> None:
        self.path = Path(path)
        self.batch_bytes = batch_bytes
        self.header: dict[str, Any] = {}
        self.nbytes = 0
        self._blocks = open_trace(self.path)
        self._buf = bytearray()
        self._eof = False

    def _more(self) -> bool:
        """Append the next block to the buffer; False at end of file."""
        if self._eof:
            return False
        block = next(self._blocks, None)
        if block is None:
            self._eof = True
            return False
        self.nbytes += len(block)
        self._buf += block
        return True

    def fail(self, why: str) -> ValueError:
        """The one-line error for an invalid file."""
        return ValueError(f"{self.path.name}: not a valid Kineto trace: {why}")

    def batches(self) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of event dicts, in file order."""
        pos = self._find_array()
        if pos < 0:
            yield from self._whole_file()
            return
        while (cut := self._next_batch(pos)) is not None:
            events, pos = cut
            yield events
            pos = self._compact(pos)
        yield self._last_batch(pos)

    def _find_array(self) -> int:
        """Parse the header before the array; return the offset of its first element (-1: none)."""
        while not (m := _KEY_RE.search(self._buf)):
            if len(self._buf) > (64 << 20) or not self._more():
                return -1
        prefix = bytes(self._buf[: m.start()]).rstrip()
        prefix = prefix[:-1] if prefix.endswith(b",") else prefix
        head = _try_loads(prefix + b"}")
        if not isinstance(head, dict):
            return -1
        self.header.update(head)
        return m.end()

    def _compact(self, pos: int) -> int:
        """Drop consumed bytes (keeping the one before ``pos``); return the new offset."""
        if pos <= BLOCK_BYTES:
            return pos
        del self._buf[: pos - 1]
        return 1

    def _next_batch(self, pos: int) -> tuple[list[dict[str, Any]], int] | None:
        """The next batch of about ``batch_bytes`` and the new offset; None when only the tail is left."""
        scan = pos + self.batch_bytes
        while True:
            while len(self._buf) <= scan and self._more():
                pass
            if len(self._buf) <= scan:
                return None
            m = _CUT_RE.search(self._buf, scan)
            if m is None:
                if not self._more():
                    return None
                continue
            events = parse_between(self._buf, pos, m.start() + 1)
            if isinstance(events, list):
                return events, m.end() - 1
            scan = m.end() - 1

    def _last_batch(self, pos: int) -> list[dict[str, Any]]:
        """The events before the array's closing bracket; the keys after it join the header."""
        while self._more():
            pass
        found = split_rest(self._buf, pos)
        if found is None:
            raise self.fail("truncated or corrupt JSON (no complete traceEvents array)")
        events, tail = found
        self.header.update(tail)
        return events

    def raw_batches(self) -> Iterator[tuple[str, Any, bytes]]:
        """Unverified batches for parallel parsing, in file order.

        Yields ("raw", content, separator) for each cut (content = events text between two
        candidate boundaries, not yet known to be valid), then ("rest", bytearray, b"") with
        everything after the last cut (byte 0 is a spare for the opening bracket). Layouts the
        cutter does not handle yield ("events", list, b"") once instead.
        """
        pos = self._find_array()
        if pos < 0:
            for events in self._whole_file():
                yield "events", events, b""
            return
        while True:
            scan = pos + self.batch_bytes
            while len(self._buf) <= scan and self._more():
                pass
            m = _CUT_RE.search(self._buf, scan) if len(self._buf) > scan else None
            if m is None:
                if self._more():
                    continue
                break
            yield "raw", bytes(self._buf[pos: m.start() + 1]), bytes(self._buf[m.start() + 1: m.end() - 1])
            pos = self._compact(m.end() - 1)
        while self._more():
            pass
        yield "rest", bytearray(b" ") + self._buf[pos:], b""

    def _whole_file(self) -> Iterator[list[dict[str, Any]]]:
        """Fallback for unusual layouts: parse the file at once."""
        while self._more():
            pass
        try:
            doc = orjson.loads(self._buf)
        except orjson.JSONDecodeError as exc:
            raise self.fail(f"truncated or corrupt JSON ({exc})") from None
        self._buf = bytearray()
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise NotATraceError(f"{self.path.name}: not a Kineto trace (no traceEvents array)")
        events = doc.pop("traceEvents")
        self.header.update(doc)
        yield events


def parse_between(buf: bytearray, lo: int, hi: int) -> Any:
    """Parse ``buf[lo:hi]`` as ``[`` + content + ``]`` by overwriting the bytes at lo-1 and hi.

    None if that is not valid JSON. The buffer is restored afterwards; nothing is copied.
    """
    before, after = buf[lo - 1], buf[hi]
    buf[lo - 1], buf[hi] = 0x5B, 0x5D  # "[", "]"
    try:
        with memoryview(buf) as view:
            return _try_loads(view[lo - 1: hi + 1])
    finally:
        buf[lo - 1], buf[hi] = before, after


def _parse_tail(buf: bytearray, at: int) -> dict[str, Any] | None:
    """Keys after the array, which must be ``}`` or ``, "k": v, ... }``; None otherwise."""
    if _END_RE.match(buf, at):
        return {}
    m = _WS_RE.match(buf, at)
    comma = m.end() if m else at
    if comma >= len(buf) or buf[comma] != 0x2C:  # ","
        return None
    buf[comma] = 0x7B  # "{"
    try:
        with memoryview(buf) as view:
            doc = _try_loads(view[comma:])
    finally:
        buf[comma] = 0x2C
    return doc if isinstance(doc, dict) else None


def split_rest(buf: bytearray, pos: int) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The last events (from ``pos``, with a spare byte before it) and the keys after the array.

    Tries the closing brackets from the end; None if none closes a valid array + tail.
    """
    q = len(buf)
    while (q := buf.rfind(b"]", pos, q)) >= 0:
        tail = _parse_tail(buf, q + 1)
        if tail is None:
            continue
        events = parse_between(buf, pos, q)
        if isinstance(events, list):
            return events, tail
    return None


def _try_loads(data: bytes | bytearray | memoryview) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def read_events(path: Path, consume: Callable[[list[dict[str, Any]]], None],
                batch_bytes: int = BATCH_BYTES) -> tuple[dict[str, Any], int]:
    """Feed every event batch of ``path`` to ``consume``; return (header, uncompressed bytes)."""
    stream = TraceStream(path, batch_bytes)
    for batch in stream.batches():
        consume(batch)
    return stream.header, stream.nbytes
