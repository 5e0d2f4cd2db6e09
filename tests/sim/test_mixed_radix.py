"""The activation units' key (:func:`sim.memory.mixed_radix`) against numpy's own row-major
index of the same offsets and ranges."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sim.memory import mixed_radix

columns = st.integers(1, 40).flatmap(
    lambda n: st.lists(st.lists(st.integers(-3, 500), min_size=n, max_size=n), min_size=1, max_size=4))


@given(columns)
def test_mixed_radix_is_ravel_multi_index(cols: list[list[int]]) -> None:
    labels = [np.asarray(c, np.int64) for c in cols]
    lows = [int(x.min()) for x in labels]
    want = np.ravel_multi_index(tuple(x - lo for x, lo in zip(labels, lows, strict=True)),
                                tuple(int(x.max()) - lo + 1 for x, lo in zip(labels, lows, strict=True)))
    assert np.array_equal(mixed_radix(labels), want)


def test_empty_rows() -> None:
    assert mixed_radix([np.zeros(0, np.int64)] * 3).size == 0
