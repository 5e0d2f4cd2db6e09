"""The straggler CV derived from the published GPU variation (topo/variability.py)."""

from __future__ import annotations

import math

import pytest

from topo.device_presets import device_presets, get_device
from topo.variability import (
    CLUSTER_GPUS,
    GPU_SPEED_CV,
    SPREAD_MAX,
    SPREAD_MEAN,
    cv_from_range,
    expected_max_normal,
    slowest_gpu_factor,
)


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


def test_gpu_presets_take_the_conservative_end_of_the_fact() -> None:
    # the 8% spread read over Summit's 27,648 GPUs: the smallest CV the fact allows
    assert GPU_SPEED_CV == pytest.approx(cv_from_range(SPREAD_MEAN, 2 * expected_max_normal(CLUSTER_GPUS[1])),
                                         abs=5e-5)
    assert all(d.speed_cv == GPU_SPEED_CV for name, d in device_presets().items() if name != "cpu-host")
    assert get_device("cpu-host").speed_cv == 0.0


def test_slowest_gpu_factor_is_the_expected_maximum() -> None:
    assert slowest_gpu_factor(0.01, 1) == 1.0
    assert slowest_gpu_factor(0.0, 4096) == 1.0
    # E[max of 2 normals] = 1/sqrt(pi)
    assert slowest_gpu_factor(0.01, 2) == pytest.approx(1 + 0.01 / math.sqrt(math.pi), rel=1e-12)
    assert slowest_gpu_factor(0.01, 1024) == pytest.approx(1.0324, abs=2e-4)
    grows = [slowest_gpu_factor(GPU_SPEED_CV, n) for n in (8, 64, 1024, 16384)]
    assert grows == sorted(grows) and grows[-1] < 1.05
    with pytest.raises(ValueError, match="^cv=0.7 is invalid"):
        slowest_gpu_factor(0.7, 8)
