"""Interval helpers vs a brute-force count of covered unit cells on an integer grid."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sim.intervals import (
    contains,
    enclosing_index,
    intersect,
    intersection_length,
    subtract,
    top_level_mask,
    total_length,
    union,
)

GRID = 60
spans = st.lists(st.tuples(st.integers(0, GRID), st.integers(0, 20)), max_size=25)


def _arrays(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([p[0] for p in pairs], dtype=float)
    return s, s + np.array([p[1] for p in pairs], dtype=float)


def _cells(pairs: list[tuple[int, int]]) -> np.ndarray:
    covered = np.zeros(GRID + 21, dtype=bool)
    for s, d in pairs:
        covered[s:s + d] = True
    return covered


def _cells_of(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    return _cells([(int(a), int(b - a)) for a, b in zip(s, e, strict=True)])


def _normalised(s: np.ndarray, e: np.ndarray) -> bool:
    return bool(np.all(e > s) and np.all(s[1:] > e[:-1]))


@given(spans)
def test_union_is_normalised_and_covers_the_same_cells(pairs: list[tuple[int, int]]) -> None:
    s, e = union(*_arrays(pairs))
    assert _normalised(s, e)
    assert np.array_equal(_cells_of(s, e), _cells(pairs))
    assert total_length(*_arrays(pairs)) == _cells(pairs).sum()


@given(spans, spans)
def test_intersect_and_subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    inter = intersect(_arrays(a), _arrays(b))
    diff = subtract(_arrays(a), _arrays(b))
    assert _normalised(*inter) and _normalised(*diff)
    assert np.array_equal(_cells_of(*inter), _cells(a) & _cells(b))
    assert np.array_equal(_cells_of(*diff), _cells(a) & ~_cells(b))
    assert intersection_length(_arrays(a), _arrays(b)) == (_cells(a) & _cells(b)).sum()


@given(spans, st.lists(st.integers(0, GRID + 20), max_size=20))
def test_point_lookups(pairs: list[tuple[int, int]], points: list[int]) -> None:
    s, e = union(*_arrays(pairs))
    p = np.array(points, dtype=float)
    inside = contains(p, s, e)
    idx = enclosing_index(p, s, e)
    for k, t in enumerate(points):
        hits = [i for i in range(s.size) if s[i] <= t <= e[i]]
        assert inside[k] == bool(hits)
        assert idx[k] == (hits[-1] if hits else -1)


def test_top_level_mask_nesting_and_ties() -> None:
    s = np.array([0, 0, 2, 5, 10, 10, 12], dtype=float)
    e = np.array([4, 10, 3, 10, 11, 10, 15], dtype=float)
    # [0,10) holds [0,4), [2,3), [5,10); [10,11) touches it (top); zero-length [10,10) ties, nested
    assert top_level_mask(s, e).tolist() == [False, True, False, False, True, False, True]


def test_empty_inputs() -> None:
    empty = (np.empty(0), np.empty(0))
    assert total_length(*empty) == 0
    assert intersect(empty, (np.array([1.0]), np.array([2.0])))[0].size == 0
    assert subtract((np.array([1.0]), np.array([2.0])), empty)[1].tolist() == [2.0]
    assert enclosing_index([1.0], *empty).tolist() == [-1]
    assert top_level_mask([], []).size == 0
