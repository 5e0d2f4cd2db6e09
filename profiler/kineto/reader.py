"""Stream the events of one Kineto Chrome-trace file in one pass, in bounded memory.

A trace is one JSON object ``{..., "traceEvents": [ev, ev, ...], ...}``; real ones reach 1 GB.
The file is read in blocks of 1 MiB (plain or gzip, ``source.py``). Each block is scanned once
for the brackets and commas outside strings (``scan.py``, numpy), which places every top-level
comma of the ``traceEvents`` array exactly; the array is cut at those commas into pieces of
about ``batch_bytes`` and each piece is parsed once by orjson (``[`` + piece + ``]``; a piece
after the first starts with its comma and gets ``[null`` in front, whose null is dropped). The
keys before the array form the header, the keys after it join it at the end.

Bounds: the header, the keys after the array and any one event are limited to
``LIMIT_BYTES`` (16 MiB); whitespace outside strings that fills whole blocks is held as one
space (1 GiB of whitespace between two events costs no memory); what is held at any time is
one piece and one block plus the columns built so far.

Errors: JSON that is not valid stops the read with one line naming the file, the byte offset,
line and column of the first bad token, orjson's message and the text found there. Because
every byte goes through orjson exactly once, the first error in the file is the one reported.
Missing or trailing commas between events and a wrong closing bracket are errors too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from profiler.kineto.pieces import Hole, Piece, StreamContext, at_end, error_at, locate, parse_piece
from profiler.kineto.scan import COMMA, OPEN_BRACKET, WHITESPACE, ScanState, scan
from profiler.kineto.source import BLOCK_BYTES, Source

BATCH_BYTES = 1 << 20
LIMIT_BYTES = 16 << 20
"""Largest header, tail (keys after the array) or single event, bytes."""
_KEY = b'"traceEvents"'


class NotATraceError(ValueError):
    """The file is JSON but has no ``traceEvents`` array (e.g. a manifest or config file)."""


class _Phase(enum.Enum):
    HEADER = "header"
    ARRAY = "array"
    TAIL = "tail"


class TraceReader:
    """One pass over one trace file: ``pieces()`` then ``header`` (complete after the pieces).

    Positions: the *stream* is the file's uncompressed bytes with whitespace-only blocks held
    as one space; a :class:`StreamContext` maps stream positions back to the file.
    """

    def __init__(self, path: Path, batch_bytes: int = BATCH_BYTES, block_bytes: int = BLOCK_BYTES,
                 limit_bytes: int = LIMIT_BYTES) -> None:
        self.path = Path(path)
        self.source = Source(self.path, block_bytes)
        self.batch_bytes = max(1, batch_bytes)
        self.limit = limit_bytes
        self.header: dict[str, Any] = {}
        self._buf = bytearray()
        self._base = 0  # stream position of _buf[0]
        self._end = 0  # stream position after the last byte appended
        self._file = 0  # file bytes consumed
        self._state = ScanState()
        self._phase = _Phase.HEADER
        self._array = -1  # stream position after the array's "["
        self._seg = -1  # stream position where the next piece starts
        self._cut = -1  # last top-level comma of the array seen (stream position)
        self._newlines = 0  # newlines before _base
        self._last_newline = -1  # file offset of the last one
        self._holes: list[Hole] = []  # the last hole before _base, then those after it

    @property
    def nbytes(self) -> int:
        """Uncompressed bytes read so far."""
        return self.source.out_bytes

    # -- errors ---------------------------------------------------------------------------

    def fail(self, why: str) -> ValueError:
        """The one-line error for an invalid file."""
        return ValueError(f"{self.path.name}: not a valid Kineto trace: {why}")

    def _context(self) -> StreamContext:
        return StreamContext(self._newlines, self._last_newline, tuple(self._holes))

    def parse(self, piece: Piece) -> list[Any]:
        """The entries of a piece (the leading ``null`` included); positioned error if invalid."""
        return parse_piece(self.fail, piece)

    # -- the pass -------------------------------------------------------------------------

    def pieces(self) -> Iterator[Piece]:
        """The array's pieces in file order; the header is complete when this ends."""
        for block in self.source:
            yield from self._feed(block)
        yield from self._finish()

    def _append(self, block: bytes) -> int:
        """Append a block (or its stand-in space); its stream position, -1 for a hole."""
        start = self._end
        a = np.frombuffer(block, dtype=np.uint8)
        if (not self._state.in_string and a.size and WHITESPACE[a[0]] and WHITESPACE[a[-1]]
                and bool(WHITESPACE[a].all())):
            self._hole(block, a)
            return -1
        self._buf += block
        self._end += len(block)
        self._file += len(block)
        return start

    def _hole(self, block: bytes, a: np.ndarray) -> None:
        nl = np.flatnonzero(a == 0x0A)
        last = self._file + int(nl[-1]) if nl.size else -1
        self._file += len(block)
        self._state.backslashes = 0
        if self._holes and self._holes[-1].at == self._end:  # extends the previous hole
            h = self._holes[-1]
            h.file_after, h.newlines = self._file, h.newlines + int(nl.size)
            h.last_newline = max(h.last_newline, last)
            return
        self._buf += b" "
        self._end += 1
        self._holes.append(Hole(self._end, self._file, int(nl.size), last))

    def _feed(self, block: bytes) -> Iterator[Piece]:
        start = self._append(block)
        if start < 0:
            self._check_limits()
            return
        st = scan(block, self._state)
        pos = st.pos + start
        i, n = 0, pos.size
        while i < n:
            if self._phase is _Phase.HEADER:
                opens = np.flatnonzero((st.char[i:] == OPEN_BRACKET) & (st.depth[i:] == 2)) + i
                i = n
                for k in opens.tolist():
                    if self._is_events_key(int(pos[k])):
                        self._start_array(int(pos[k]) + 1)
                        i = k + 1
                        break
            elif self._phase is _Phase.ARRAY:
                below = np.flatnonzero(st.depth[i:] < 2)
                stop = i + int(below[0]) if below.size else n
                sel = (st.char[i:stop] == COMMA) & (st.depth[i:stop] == 2)
                if sel.any():
                    self._cut = int(pos[i:stop][sel][-1])
                if stop < n:
                    yield self._last_piece(int(pos[stop]))
                i = n
            else:
                break
        if self._phase is _Phase.ARRAY:
            yield from self._batch_at_cut()
        self._check_limits()

    def _is_events_key(self, bracket: int) -> bool:
        """Whether the "[" at stream position ``bracket`` opens the top-level traceEvents value."""
        rel = bracket - self._base
        head = bytes(self._buf[max(0, rel - 4096): rel]).rstrip()
        if not head.endswith(b":"):
            return False
        head = head[:-1].rstrip()
        return head.endswith(_KEY) and not head[: -len(_KEY)].endswith(b"\\")

    def _start_array(self, after: int) -> None:
        rel = after - self._base
        key = self._buf.rfind(_KEY, 0, rel)
        prefix = bytes(self._buf[:key]).rstrip()
        if not prefix.endswith((b",", b"{")):  # '{"a": 1 "traceEvents": [' is not an object
            raise error_at(self.fail, self._buf, self._base, self._base + key, "expected ',' or '}' before "
                           '"traceEvents"', self._context())
        prefix = prefix[:-1] if prefix.endswith(b",") else prefix
        text = prefix + b"}"
        try:
            head = orjson.loads(text)
        except orjson.JSONDecodeError:
            err = locate(self.fail, text, 0, self._base, self._context())
            raise err if err is not None else self.fail("corrupt header") from None
        if not isinstance(head, dict):
            raise self.fail("the file is not a JSON object")
        self.header.update(head)
        self._phase = _Phase.ARRAY
        self._array = self._seg = after
        self._drop_to(after)

    def _drop_to(self, pos: int) -> None:
        """Forget the buffer before stream position ``pos`` (counting its newlines)."""
        rel = pos - self._base
        if rel <= 0:
            return
        gone = memoryview(self._buf)[:rel]
        n = bytes(gone).count(b"\n") if rel < (1 << 16) else int(np.count_nonzero(np.frombuffer(gone, np.uint8) == 10))
        if n:
            nl = bytes(gone).rfind(b"\n")
            self._newlines += n
            self._last_newline = max(self._last_newline, self._context().file_offset(self._base + nl))
        gone.release()
        keep: list[Hole] = []
        for h in self._holes:
            if self._base < h.at <= pos:
                self._newlines += h.newlines
                self._last_newline = max(self._last_newline, h.last_newline)
            if h.at <= pos:
                keep = [h]
            else:
                keep.append(h)
        self._holes = keep
        del self._buf[:rel]
        self._base = pos

    def _piece(self, lo: int, hi: int, close: bool, final: bool) -> Piece:
        first = lo == self._array
        prefix = b"[" if first else b"[null"
        body = self._buf[lo - self._base: hi - self._base]
        text = prefix + body + (b"]" if close else b"")
        return Piece(bytes(text), 0 if first else 1, lo, len(prefix), final, self._context())

    def _batch_at_cut(self) -> Iterator[Piece]:
        """A piece up to the last top-level comma once ``batch_bytes`` are held."""
        if self._cut <= self._seg or self._end - self._seg < self.batch_bytes:
            return
        piece = self._piece(self._seg, self._cut, close=True, final=False)
        self._seg = self._cut
        self._drop_to(self._seg)
        yield piece

    def _last_piece(self, bracket: int) -> Piece:
        """The piece ending with the array's closing bracket (any other closer: orjson's error)."""
        piece = self._piece(self._seg, bracket + 1, close=False, final=True)
        self._phase = _Phase.TAIL
        self._drop_to(bracket + 1)
        return piece

    def _check_limits(self) -> None:
        held = self._end - self._base
        if self._phase is _Phase.HEADER and held > self.limit:
            err = locate(self.fail, self._buf, 0, self._base, self._context())
            if err is not None and not at_end(str(err)):
                raise err
            raise self.fail(f"no traceEvents array in the first {self.limit >> 20} MiB (the header "
                            "before it is limited to that)")
        if self._phase is _Phase.ARRAY and self._end - max(self._seg, self._cut) > self.limit:
            piece = self._piece(self._seg, self._end, close=False, final=False)
            err = locate(self.fail, piece.text, piece.prefix, piece.at, piece.context)
            if err is not None and not at_end(str(err)):
                raise err
            since = max(self._seg, self._cut + 1)
            raise self.fail(f"the traceEvents entry at {piece.context.where(piece.text[piece.prefix:], piece.at, since)} "
                            f"is over {self.limit >> 20} MiB (an event is limited to that)")
        if self._phase is _Phase.TAIL and held > self.limit:
            raise self.fail(f"over {self.limit >> 20} MiB of JSON after the traceEvents array")

    def _finish(self) -> Iterator[Piece]:
        if self._phase is _Phase.HEADER:
            yield from self._whole_file()
        elif self._phase is _Phase.ARRAY:
            piece = self._piece(self._seg, self._end, close=False, final=True)
            err = locate(self.fail, piece.text, piece.prefix, piece.at, piece.context)
            if err is not None and not at_end(str(err)):
                raise err
            where = piece.context.where(piece.text[piece.prefix:], piece.at, self._end)
            raise self.fail(f"truncated or corrupt JSON: the file ends inside the traceEvents array "
                            f"at {where}")
        else:
            self._parse_tail()

    def _parse_tail(self) -> None:
        """Keys after the array: ``}`` or ``, "k": v, ... }`` and nothing else."""
        tail = bytes(self._buf).lstrip()
        at = self._base + len(self._buf) - len(tail)
        ctx = self._context()
        if tail.startswith(b"}"):
            text, prefix = b"{" + tail, 1
        elif tail.startswith(b","):
            text, prefix = b"{" + tail[1:], 0
        else:
            raise error_at(self.fail, tail, at, at, "expected ',' or '}' after the traceEvents array", ctx)
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            err = locate(self.fail, text, prefix, at, ctx)
            raise err if err is not None else self.fail("corrupt JSON after the array") from None
        if isinstance(doc, dict):
            self.header.update(doc)
        if "traceEvents" in self.header:
            raise self.fail("traceEvents appears twice in the top-level object")

    def _whole_file(self) -> Iterator[Piece]:
        """No traceEvents array was found: parse the (small) file at once to say why."""
        try:
            doc = orjson.loads(self._buf)
        except orjson.JSONDecodeError:
            err = locate(self.fail, self._buf, 0, self._base, self._context())
            raise err if err is not None else self.fail("corrupt JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise NotATraceError(f"{self.path.name}: not a Kineto trace (no traceEvents array)")
        events = doc.pop("traceEvents")
        self.header.update(doc)
        self._buf = bytearray()
        yield Piece(orjson.dumps(events), 0, 0, 1, True, self._context())


class TraceStream:
    """Event lists of a trace, in file order (a thin wrapper kept for tests and callers)."""

    def __init__(self, path: Path, batch_bytes: int = BATCH_BYTES, block_bytes: int = BLOCK_BYTES) -> None:
        self.reader = TraceReader(path, batch_bytes, block_bytes)

    @property
    def header(self) -> dict[str, Any]:
        """Top-level keys other than traceEvents (complete after iteration)."""
        return self.reader.header

    @property
    def nbytes(self) -> int:
        """Uncompressed bytes read."""
        return self.reader.nbytes

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of entries, in file order."""
        for piece in self.reader.pieces():
            yield self.reader.parse(piece)[piece.start:]


def read_events(path: Path, consume: Callable[[list[dict[str, Any]]], None],
                batch_bytes: int = BATCH_BYTES) -> tuple[dict[str, Any], int]:
    """Feed every event batch of ``path`` to ``consume``; return (header, uncompressed bytes)."""
    stream = TraceStream(path, batch_bytes)
    for batch in stream.batches():
        consume(batch)
    return stream.header, stream.nbytes
