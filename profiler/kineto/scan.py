"""Structural scan of JSON text with numpy: where the brackets and commas outside strings are.

The trace reader cuts the ``traceEvents`` array at its top-level commas, so it must know which
bytes lie inside strings. :func:`scan` finds them for one block of bytes at a time, carrying the
state (inside a string or not, the backslash run at the end of the block, bracket depth) into the
next block, so a file is scanned once, in blocks, whatever its size. It matches a byte-by-byte
state machine exactly (tests/profiler/test_kineto_scan.py): a quote toggles the string state
unless it is inside a string and preceded by an odd run of backslashes; ``{ [`` raise the depth,
``} ]`` lower it, ``,`` leaves it, all only outside strings. It does not validate JSON: orjson
does that when it parses the pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

QUOTE, BACKSLASH, COMMA = 0x22, 0x5C, 0x2C
OPEN_BRACE, CLOSE_BRACE, OPEN_BRACKET, CLOSE_BRACKET = 0x7B, 0x7D, 0x5B, 0x5D
_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[[OPEN_BRACE, CLOSE_BRACE, OPEN_BRACKET, CLOSE_BRACKET, COMMA]] = True
_DELTA = np.zeros(256, dtype=np.int64)
_DELTA[[OPEN_BRACE, OPEN_BRACKET]] = 1
_DELTA[[CLOSE_BRACE, CLOSE_BRACKET]] = -1
WHITESPACE = np.zeros(256, dtype=bool)
WHITESPACE[[0x20, 0x09, 0x0A, 0x0D]] = True


@dataclass
class ScanState:
    """What one block leaves for the next: inside a string, trailing backslashes, depth."""

    in_string: bool = False
    backslashes: int = 0
    depth: int = 0


@dataclass(frozen=True)
class Structure:
    """Brackets and commas outside strings in one block: offset in the block, byte, depth after it."""

    pos: npt.NDArray[np.int64]
    char: npt.NDArray[np.uint8]
    depth: npt.NDArray[np.int64]


def _toggles(a: npt.NDArray[np.uint8], state: ScanState) -> npt.NDArray[np.int64]:
    """Offsets of the quotes that open or close a string."""
    q = np.flatnonzero(a == QUOTE)
    if q.size == 0 or (not state.backslashes and not (a == BACKSLASH).any()):
        return q
    after_bs = np.zeros(q.size, dtype=bool)
    inner = q > 0
    after_bs[inner] = a[q[inner] - 1] == BACKSLASH
    if q[0] == 0 and state.backslashes:
        after_bs[0] = True
    cand = np.flatnonzero(after_bs)
    if cand.size == 0:
        return q
    # length of the backslash run before each candidate quote
    idx = np.arange(a.size, dtype=np.int64)
    last_other = np.maximum.accumulate(np.where(a != BACKSLASH, idx, -1))
    qc = q[cand]
    before = np.where(qc > 0, last_other[np.maximum(qc - 1, 0)], -1)
    run = qc - 1 - before
    run = np.where(before < 0, run + state.backslashes, run)
    odd = cand[(run & 1) == 1]
    if odd.size == 0:
        return q
    keep = np.ones(q.size, dtype=bool)
    inside, prev = state.in_string, 0
    for k in odd.tolist():  # an odd run escapes the quote only inside a string
        inside ^= bool((k - prev) & 1)
        if inside:
            keep[k] = False
        else:
            inside = True
        prev = k + 1
    return q[keep]


def scan(block: bytes | bytearray | memoryview, state: ScanState) -> Structure:
    """The structure of ``block``; ``state`` (entering the block) is updated to its end."""
    a = np.frombuffer(block, dtype=np.uint8)
    if a.size == 0:
        return Structure(np.empty(0, np.int64), np.empty(0, np.uint8), np.empty(0, np.int64))
    toggles = _toggles(a, state)
    s = np.flatnonzero(_STRUCTURAL[a])
    if toggles.size:
        mark = np.zeros(a.size + 1, dtype=np.uint8)
        mark[toggles + 1] = 1
        parity = np.bitwise_xor.accumulate(mark)[s]  # parity of the toggles before each offset
        s = s[(parity ^ state.in_string) == 0]
    elif state.in_string:
        s = s[:0]
    ch = a[s]
    depth = state.depth + np.cumsum(_DELTA[ch])
    state.in_string = bool((state.in_string + toggles.size) & 1)
    if depth.size:
        state.depth = int(depth[-1])
    if a[-1] == BACKSLASH:
        others = np.flatnonzero(a != BACKSLASH)
        state.backslashes = (a.size - 1 - int(others[-1])) if others.size else state.backslashes + a.size
    else:
        state.backslashes = 0
    return Structure(s.astype(np.int64), ch, depth)


def reference_scan(data: bytes, state: ScanState) -> list[tuple[int, int, int]]:
    """The byte-by-byte state machine that :func:`scan` reproduces: (offset, byte, depth after)."""
    out = []
    escaped = state.in_string and state.backslashes % 2 == 1
    for i, c in enumerate(data):
        if state.in_string:
            if escaped:
                escaped = False
            elif c == BACKSLASH:
                escaped = True
            elif c == QUOTE:
                state.in_string = False
        elif c == QUOTE:
            state.in_string = True
        elif _STRUCTURAL[c]:
            state.depth += int(_DELTA[c])
            out.append((i, c, state.depth))
    trailing = len(data) - len(data.rstrip(b"\\"))
    state.backslashes = trailing if trailing < len(data) else state.backslashes + trailing
    return out
