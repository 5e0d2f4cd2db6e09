"""The engine's simulated bubble equals the closed forms on uniform stages with no network cost.

GPipe and 1F1B: (p-1)/(m+p-1); interleaved 1F1B with v chunks: (p-1)/(v*m+p-1)
(Narayanan et al. 2021, sec. 2.2). Costs per rank: F = 1, B = 2 (each chunk 1/v of them).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.pipeline import build_schedule
from sim.playground import UnitCosts, run_playground

GRID_PM = [(p, m) for p in (2, 3, 4, 8, 16) for m in (1, 2, 5, 16, 64)]
BIG = 256  # p * m * v at or above which a grid cell runs only in the full suite (0.1-0.6 s CPU each)


def grid(*cells: tuple[int, ...]) -> list[object]:
    """Grid cells as parameters; the large ones (p * m * v >= BIG) marked slow."""
    return [pytest.param(*c, marks=pytest.mark.slow) if c[0] * c[1] * (c[2] if len(c) > 2 else 1) >= BIG else c
            for c in cells]


def bubble(name: str, p: int, m: int, v: int = 1, **costs: float) -> float:
    return run_playground(build_schedule(name, p, m, v), UnitCosts(**costs)).metrics.bubble_fraction


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), grid(*GRID_PM))
def test_gpipe_and_1f1b_bubble_closed_form(name, p, m):
    assert bubble(name, p, m) == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


@pytest.mark.parametrize("name", ["interleaved", "interleaved-megatron"])
@pytest.mark.parametrize(("p", "m", "v"), grid(*[(p, k * p, v) for p in (2, 4, 8, 16) for k in (1, 2) for v in (2, 3, 4)
                                                if k * p <= 64], (4, 64, 4), (2, 64, 2)))
def test_interleaved_bubble_closed_form(name, p, m, v):
    assert bubble(name, p, m, v) == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)


@pytest.mark.parametrize(("p", "m"), grid((2, 2), (4, 8), (8, 16), (16, 32), (4, 1)))
def test_zb_h1_bubble_below_1f1b(p, m):
    assert bubble("zb-h1", p, m) < bubble("1f1b", p, m)


def test_zb_h1_bubble_is_about_a_third_of_1f1b_when_f_b_w_equal():
    # Qi et al. 2023: with T_F = T_B = T_W, ZB-H1's bubble is about 1/3 of 1F1B's.
    p, m = 8, 64
    ratio = bubble("zb-h1", p, m, forward_s=1, backward_s=2, backward_weight_s=1) / bubble("1f1b", p, m)
    assert ratio == pytest.approx(1 / 3, abs=0.05)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 8), m=st.integers(1, 24), f=st.floats(0.1, 3), b=st.floats(0.1, 6))
@pytest.mark.slow
def test_more_microbatches_never_increase_1f1b_bubble(p, m, f, b):
    costs = dict(forward_s=f, backward_s=b, backward_weight_s=b / 2)
    assert bubble("1f1b", p, m + 1, **costs) <= bubble("1f1b", p, m, **costs) + 1e-12
