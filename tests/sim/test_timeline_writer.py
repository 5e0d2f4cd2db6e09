"""The timeline writer's span order equals numpy's lexsort by (rank, start, end), stable."""

from __future__ import annotations

import numpy as np
import pytest

from sim.timeline_writer import _span_order


@pytest.mark.parametrize("ranks", [4, 70_000])  # radix-sorted ranks, and ranks beyond int16
def test_span_order_is_the_stable_lexsort(ranks: int) -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    rank = rng.integers(0, ranks, n)
    start = rng.integers(0, 50, n) * 0.25  # many equal starts on one rank
    end = start + rng.integers(0, 3, n) * 0.5  # and equal ends among those
    start[::97] = -0.0  # signed zeros tie with 0.0
    expected = np.lexsort((end, start, rank))
    assert np.array_equal(_span_order(rank, start, end), expected)


def test_span_order_of_nothing() -> None:
    empty = np.zeros(0)
    assert _span_order(empty.astype(np.int64), empty, empty).size == 0
