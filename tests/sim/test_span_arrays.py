"""sim.span_arrays: the numpy grouping behind the metrics and memory curves equals pandas' groupby."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.arrays import sorted_unique
from sim.span_arrays import (
    group_sums,
    label_mask,
    pair_key,
    run_starts,
    stable_order,
)


@pytest.mark.parametrize("seed", range(40))
def test_group_sums_equal_pandas_groupby_sum_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2000))
    groups = rng.integers(0, int(rng.integers(1, 40)), n)
    if seed % 2:
        groups = np.sort(groups)  # pandas then sums with np.add.reduceat
    values = rng.normal(size=n) * 10.0 ** rng.integers(-5, 17, n)  # cancellation: the order matters
    if seed % 3 == 0:
        values[rng.random(n) < 0.1] = np.nan
    if seed % 5 == 0:
        values = np.round(values)
    truth = pd.Series(values).groupby(groups).sum().to_numpy()
    order = np.argsort(groups, kind="stable")
    got = group_sums(values[order], run_starts(groups[order]), reduceat=bool(np.all(np.diff(groups) >= 0)))
    assert np.array_equal(got, truth)


def test_label_mask_and_ordering_helpers() -> None:
    lanes = pd.Series(pd.Categorical(["compute", "comm.tp", None, "comm.dp"]))
    assert label_mask(lanes, lambda lane: lane.startswith("comm")).tolist() == [False, True, False, True]
    assert label_mask(pd.Series(["a", "b"]), lambda x: x == "b").tolist() == [False, True]
    assert stable_order(np.array([1, 1, 2])) is None
    assert stable_order(np.array([2, 1, 2])).tolist() == [1, 0, 2]
    major, minor = np.array([3, 1, 1, -2]), np.array([0, 5, -1, 7])
    key = pair_key(major, minor)
    assert np.argsort(key).tolist() == sorted(range(4), key=lambda i: (major[i], minor[i]))
    assert run_starts(np.array([4, 4, 5, 5, 5, 6])).tolist() == [0, 2, 5]


@pytest.mark.parametrize("size", [0, 1, 2, 50])
def test_sorted_unique_is_numpy_unique(size: int) -> None:
    values = np.random.default_rng(size).integers(-5, 6, size=(size, 2))
    assert np.array_equal(sorted_unique(values), np.unique(values))
    assert sorted_unique(values).dtype == np.unique(values).dtype
