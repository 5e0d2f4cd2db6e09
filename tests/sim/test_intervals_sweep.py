"""The pairwise intersection and the union's normalised-input shortcut against the coverage
sweep they replaced (:func:`sim.intervals._coverage`, still behind ``subtract``): the same
intervals bit for bit on float endpoints, touching and repeated times included, so every metric
built on them (overlap, exposed communication) is unchanged."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sim.intervals import _coverage, _segments, intersect, is_normalised, union

# float endpoints on a coarse grid (ties and touching intervals are frequent) plus a fine offset
times = st.integers(0, 40).map(lambda k: k * 0.25) | st.floats(0, 10, allow_nan=False, width=64)
pairs = st.lists(st.tuples(times, st.floats(0, 3, allow_nan=False, width=64)), max_size=30)


def _arrays(p: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([x[0] for x in p], dtype=float)
    return s, s + np.array([x[1] for x in p], dtype=float)


def _swept(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ua, ub = union(*a), union(*b)
    if ua[0].size == 0 or ub[0].size == 0:
        return np.empty(0), np.empty(0)
    t, cov = _coverage([ua, ub])
    return _segments(t, (cov[0] > 0) & (cov[1] > 0))


@given(pairs, pairs)
def test_intersect_equals_the_coverage_sweep_bit_for_bit(a: list[tuple[float, float]],
                                                       b: list[tuple[float, float]]) -> None:
    got, want = intersect(_arrays(a), _arrays(b)), _swept(_arrays(a), _arrays(b))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert float(np.sum(got[1] - got[0])) == float(np.sum(want[1] - want[0]))


@given(pairs)
def test_union_of_a_normalised_set_is_itself(p: list[tuple[float, float]]) -> None:
    s, e = union(*_arrays(p))
    assert is_normalised(s, e)
    again = union(s, e)
    assert np.array_equal(again[0], s) and np.array_equal(again[1], e)
    assert again[0] is not s  # a new array, as from any other input


def test_touching_or_empty_intervals_are_not_normalised() -> None:
    assert not is_normalised(np.array([0.0, 1.0]), np.array([1.0, 2.0]))  # touching: union merges them
    assert not is_normalised(np.array([0.0]), np.array([0.0]))  # empty: union drops it
    assert is_normalised(np.array([0.0, 1.5]), np.array([1.0, 2.0]))
