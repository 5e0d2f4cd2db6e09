"""The numpy structural scanner equals the byte-by-byte state machine, across any block split."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from profiler.kineto.scan import ScanState, reference_scan, scan

ALPHABET = b'"\\{}[],: ab\n'


def _numpy_scan(data: bytes, cuts: list[int]) -> tuple[list[tuple[int, int, int]], ScanState]:
    state, out, lo = ScanState(), [], 0
    for hi in [*sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]:
        s = scan(data[lo:hi], state)
        out += [(int(p) + lo, int(c), int(d)) for p, c, d in zip(s.pos, s.char, s.depth, strict=True)]
        lo = hi
    return out, state


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(list(ALPHABET)), max_size=200).map(bytes),
       st.lists(st.integers(min_value=0, max_value=200), max_size=8))
@pytest.mark.slow
def test_scanner_equals_state_machine(data: bytes, cuts: list[int]) -> None:
    ref_state = ScanState()
    expected = reference_scan(data, ref_state)
    got, state = _numpy_scan(data, cuts)
    assert got == expected
    assert (state.in_string, state.depth) == (ref_state.in_string, ref_state.depth)
    assert state.backslashes % 2 == ref_state.backslashes % 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet='"\\{}[],: xé', max_size=10), max_size=20),
       st.lists(st.integers(min_value=0, max_value=400), max_size=6))
@pytest.mark.slow
def test_scanner_on_valid_json_finds_only_real_commas(names: list[str], cuts: list[int]) -> None:
    import orjson

    data = orjson.dumps([{"name": n, "args": {"s": [n]}} for n in names])
    got, state = _numpy_scan(data, cuts)
    top = [p for p, c, d in got if c == ord(",") and d == 1]
    assert len(top) == max(len(names) - 1, 0)
    assert not state.in_string and state.depth == 0
    for p in top:  # each top-level comma splits the array into valid JSON
        assert isinstance(orjson.loads(data[:p] + b"]"), list)


def test_backslash_runs_across_blocks() -> None:
    data = b'["a\\\\\\"", "b\\\\", "c"]'
    for cut in range(len(data) + 1):
        got, state = _numpy_scan(data, [cut])
        assert [p for p, c, d in got if c == ord(",")] == [data.index(b', "b'), data.index(b', "c')]
        assert not state.in_string and state.depth == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet='"\\{}[],: xé\n', max_size=10), max_size=25),
       st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=300),
       st.sampled_from([0, 1, 2]), st.integers(min_value=0, max_value=400))
@pytest.mark.slow
def test_reader_with_any_blocks_equals_whole_file_parse(tmp_path_factory: pytest.TempPathFactory, names: list[str],
                                                        block: int, batch: int, indent: int, spaces: int) -> None:
    """The streaming reader, with blocks and batches of any size and whitespace runs (held as
    holes when they fill a block), returns what orjson.loads of the whole file returns."""
    import orjson

    from profiler.kineto.reader import TraceStream

    events: list[Any] = [{"ph": "X", "name": n, "args": {"s": n, "l": [{"k": n}]}} for n in names]
    events += [1, None, "x]"]
    doc = {"schemaVersion": 1, "traceEvents": events, "tail": names}
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent == 1 else 0)
    if indent == 2:
        data = data.replace(b"},{", b"}," + b" " * spaces + b"\n" * (spaces % 3) + b"{")
        try:
            assume(orjson.loads(data) == doc)  # the replacement may have hit a string
        except orjson.JSONDecodeError:
            assume(False)
    path = tmp_path_factory.mktemp("blk") / "t.json"
    path.write_bytes(data)
    stream = TraceStream(path, batch, block)
    got = [e for b in stream.batches() for e in b]
    assert got == events and stream.header == {"schemaVersion": 1, "tail": names}


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=6).filter(lambda b: b.strip() != b""), st.integers(min_value=1, max_value=120),
       st.integers(min_value=1, max_value=200))
@pytest.mark.slow
def test_reader_error_position_is_orjsons(tmp_path_factory: pytest.TempPathFactory, junk: bytes, where: int,
                                          block: int) -> None:
    """Junk inserted between events: if orjson rejects the file, the reader's error names the same
    byte as orjson's (converted from its character position); if orjson accepts it, so does the reader."""
    import orjson

    from profiler.kineto.reader import TraceStream

    body = b",\n".join(b'{"ph": "i", "name": "e%d"}' % i for i in range(12))
    cuts = [i + 1 for i in range(len(body)) if body[i: i + 1] in b",\n"]
    at = cuts[where % len(cuts)]
    data = b'{"traceEvents": [\n' + body[:at] + junk + body[at:] + b"\n]}"
    path = tmp_path_factory.mktemp("junk") / "t.json"
    path.write_bytes(data)
    try:
        orjson.loads(data)
        expected, utf8_bad = None, False
    except orjson.JSONDecodeError as exc:
        try:
            expected, utf8_bad = len(data.decode("utf-8")[: exc.pos].encode("utf-8")), False
        except UnicodeDecodeError as bad:  # orjson checks UTF-8 first (position 0): the first bad byte
            expected, utf8_bad = bad.start, True
    stream = TraceStream(path, 64, block)
    if expected is None:
        assert len([e for b in stream.batches() for e in b]) >= 12
        return
    with pytest.raises(ValueError) as err:
        for _ in stream.batches():
            pass
    msg = str(err.value)
    assert "\n" not in msg
    if "ends inside" in msg:
        return
    reported = int(msg.split(" at byte ")[1].split()[0])
    # the reader reports the first error in file order: with bad UTF-8 that may be an earlier token
    assert reported <= expected if utf8_bad else reported == expected, (msg, expected)


_BASE = (b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n    {"ph": "X", "name": "a\\\\\\"}, {", "args": {"l": [1, '
         b'{"b": "]"}]}},\n    {"ph": "i"}, 3,\n    {"ph": "M", "name": "x"}\n  ],\n  "tail": [1, "]"]\n}')
_PIECES = [b",", b"]", b"}", b"{", b"[", b'"', b"\\", b" ", b"\n", b"1", b":", b"null", b"x", b"\xc3", b"\xe9"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(_BASE)), st.sampled_from(["insert", "delete", "cut"]),
                          st.sampled_from(_PIECES)), min_size=1, max_size=3),
       st.sampled_from([(1 << 20, 1 << 20), (7, 5), (1, 1)]))
@pytest.mark.slow
def test_reader_accepts_exactly_what_orjson_accepts(tmp_path_factory: pytest.TempPathFactory,
                                                    edits: list[tuple[int, str, bytes]], sizes: tuple[int, int]) -> None:
    """Damaged documents: valid traces read as orjson reads them, anything else is an error."""
    import orjson

    from profiler.kineto.reader import NotATraceError, TraceStream

    data = _BASE
    for pos, op, piece in edits:
        pos = min(pos, len(data))
        data = (data[:pos] + piece + data[pos:] if op == "insert" else
                data[:pos] + data[pos + len(piece):] if op == "delete" else data[:pos])
    path = tmp_path_factory.mktemp("acc") / "t.json"
    path.write_bytes(data)
    rejected = False
    try:
        doc = orjson.loads(data)  # may be None: the document "null"
    except orjson.JSONDecodeError:
        doc, rejected = None, True
    stream = TraceStream(path, sizes[1], sizes[0])
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc.pop("traceEvents")
        assert [e for b in stream.batches() for e in b] == events and stream.header == doc
        return
    with pytest.raises(ValueError) as err:  # NotATraceError is a ValueError
        for _ in stream.batches():
            pass
    assert "\n" not in str(err.value)
    assert not rejected or not isinstance(err.value, NotATraceError)
