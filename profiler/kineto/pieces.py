"""Pieces of a trace's ``traceEvents`` array (:mod:`profiler.kineto.reader` cuts them) and the
one-line error that names where in the file a piece's JSON goes wrong: stream positions mapped
back to file offsets, lines and columns across the whitespace held as one space."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class Hole:
    """A run of whitespace blocks held as one space; ``at`` is the stream position after it."""

    at: int
    file_after: int
    newlines: int
    last_newline: int


@dataclass(frozen=True)
class StreamContext:
    """What locating an error in a piece of text needs: the newlines before it and the holes."""

    newlines: int
    last_newline: int  # file offset, -1 if none
    holes: tuple[Hole, ...]

    def file_offset(self, pos: int) -> int:
        """File offset of stream position ``pos``."""
        i = bisect.bisect_right([h.at for h in self.holes], pos) - 1
        return pos if i < 0 else self.holes[i].file_after + pos - self.holes[i].at

    def where(self, text: bytes | bytearray | memoryview, at: int, pos: int) -> str:
        """"byte B (line L, column C)" of stream position ``pos``; ``text`` starts at ``at``."""
        off = self.file_offset(pos)
        head = bytes(text[: max(0, pos - at)])
        lines, last = self.newlines + head.count(b"\n"), self.last_newline
        for h in self.holes:
            if at < h.at <= pos:
                lines += h.newlines
                last = max(last, h.last_newline)
        nl = head.rfind(b"\n")
        if nl >= 0:
            last = max(last, self.file_offset(at + nl))
        return f"byte {off} (line {lines + 1}, column {off - last})"


@dataclass(frozen=True)
class Piece:
    """A slice of the traceEvents array ready for orjson: ``text`` is ``[...]``.

    ``start``: entries of the parsed list that are not events (1 for the ``null`` in front of
    every piece but the first). ``at``: stream position of ``text[prefix]``.
    """

    text: bytes
    start: int
    at: int
    prefix: int
    final: bool
    context: StreamContext


def at_end(msg: str) -> bool:
    """Whether orjson's complaint is only that the text ended (not a bad token)."""
    return "unexpected end of data" in msg or "found the end of the file" in msg


def error_at(fail: Callable[[str], ValueError], body: bytes | bytearray | memoryview, at: int, pos: int, msg: str,
             ctx: StreamContext) -> ValueError:
    """``fail``'s error for stream position ``pos`` of ``body`` (which starts at ``at``): where it
    is in the file, orjson's ``msg`` and the text found there."""
    rel = max(0, pos - at)
    found_bytes = bytes(body[rel: rel + 24])
    found = (repr(found_bytes.decode("utf-8", "replace")) + ("..." if len(found_bytes) == 24 else "")
             if found_bytes else "the end of the file")
    return fail(f"truncated or corrupt JSON at {ctx.where(body, at, pos)}: {msg}; found {found}")


def locate(fail: Callable[[str], ValueError], text: bytes | bytearray, prefix: int, at: int,
           ctx: StreamContext) -> ValueError | None:
    """The error orjson finds in ``text`` (``text[prefix]`` is at stream position ``at``), if any."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raw = bytes(text)
        try:  # orjson checks UTF-8 first and then reports position 0: find the byte here
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return error_at(fail, memoryview(text)[prefix:], at, at + max(bad.start - prefix, 0),
                            "not valid UTF-8", ctx)
        byte = len(raw.decode("utf-8")[: exc.pos].encode("utf-8"))
        return error_at(fail, memoryview(text)[prefix:], at, at + max(byte - prefix, 0), exc.msg, ctx)
    return None


def parse_piece(fail: Callable[[str], ValueError], piece: Piece) -> list[Any]:
    """The entries of a piece (the leading ``null`` included); positioned error if invalid."""
    try:
        events = orjson.loads(piece.text)
    except orjson.JSONDecodeError:
        body = memoryview(piece.text)[piece.prefix: len(piece.text) - 1]
        if not piece.final and bytes(body).rstrip().endswith(b","):  # ",," : no entry before the cut
            raise error_at(fail, memoryview(piece.text)[piece.prefix:], piece.at, piece.at + len(body),
                           "unexpected character, expected a JSON value", piece.context) from None
        err = locate(fail, piece.text, piece.prefix, piece.at, piece.context)
        raise err if err is not None else fail("corrupt JSON") from None
    if piece.start == 0 and not events and not piece.final:  # "[ , {...}": no first entry
        body = memoryview(piece.text)[piece.prefix:]
        raise error_at(fail, body, piece.at, piece.at + len(body) - 1,
                       "unexpected character, expected a JSON value", piece.context)
    return events  # type: ignore[no-any-return]
