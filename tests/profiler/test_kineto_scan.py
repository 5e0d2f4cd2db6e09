"""The numpy structural scanner equals the byte-by-byte state machine, across any block split."""

from __future__ import annotations

from hypothesis import given, settings
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
