"""The straggler CV derived from the published GPU variation (topo/variability.py)."""

from __future__ import annotations

import pytest

from sim.stragglers import expected_max_normal
from topo.variability import CLUSTER_GPUS, SPREAD_MAX, SPREAD_MEAN, cv_from_range


def test_cv_from_the_published_spread() -> None:
    # E[range of n normals] = 2 E[max of n]: about 5.9 for 400 GPUs, 8.2 for 27,648
    low_n, high_n = (2 * expected_max_normal(n) for n in CLUSTER_GPUS)
    assert low_n == pytest.approx(5.94, abs=0.05) and high_n == pytest.approx(8.19, abs=0.05)
    cvs = [cv_from_range(SPREAD_MEAN, r) for r in (high_n, low_n)]
    assert cvs[0] == pytest.approx(0.0098, abs=0.0005) and cvs[1] == pytest.approx(0.0135, abs=0.0005)
    assert cv_from_range(SPREAD_MAX, low_n) < 0.04


def test_straggler_cost_at_scale_with_that_cv() -> None:
    # cv = 1%: the slowest of 1,024 synchronising GPUs is ~3.2% behind the mean; of 8, ~1.4%
    assert 0.01 * expected_max_normal(1024) == pytest.approx(0.032, abs=0.001)
    assert 0.01 * expected_max_normal(8) == pytest.approx(0.014, abs=0.001)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="^expected_range_sigmas=0"):
        cv_from_range(0.08, 0)
