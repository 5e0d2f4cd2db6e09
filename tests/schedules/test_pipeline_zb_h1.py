"""ZB-H1 against the construction and claims of Qi et al. 2023 ("Zero Bubble Pipeline
Parallelism", sec. 2.1, Fig. 3): 1F1B's F/B order, W deferred so every stage holds p micro-batches,
peak memory no higher than 1F1B's, and a bubble of (p-1)(T_F + T_B - T_W) — a third of 1F1B's
when T_F = T_B = T_W."""

from __future__ import annotations

import pytest

from schedules.actions import Action
from schedules.pipeline import build_schedule, execute_unit_costs, peak_inflight

SHAPES = [(p, m) for p in range(1, 10) for m in (p, p + 1, 2 * p, 3 * p + 2, 24)]


def _phases(order, phase: str) -> list[int]:
    return [a.microbatch for a in order if a.phase == phase]


@pytest.mark.parametrize("pp, m", SHAPES)
def test_forward_and_backward_order_is_1f1b(pp: int, m: int) -> None:
    zb = build_schedule("zb-h1", pp, m)
    ref = build_schedule("1f1b", pp, m)
    for zb_order, ref_order in zip(zb.orders, ref.orders, strict=True):
        assert [a for a in zb_order if a.phase != "W"] == list(ref_order)


@pytest.mark.parametrize("pp, m", SHAPES)
def test_warmup_and_weight_deferral(pp: int, m: int) -> None:
    for rank, order in enumerate(build_schedule("zb-h1", pp, m).orders):
        kinds = [a.phase for a in order]
        # warm-up: p - rank forwards before the first B (1F1B's p-1-rank, then the first steady F)
        assert kinds.index("B") == min(pp - rank, m)
        # every stage forwards p micro-batches before its first W (same in-flight count)
        assert kinds[:kinds.index("W")].count("F") == min(pp, m)
        # W passes run in micro-batch order, each after its own B
        assert _phases(order, "W") == list(range(m))
        for i, a in enumerate(order):
            if a.phase == "W":
                assert i > order.index(Action(a.stage, "B", a.microbatch))
        # steady state: the B of micro-batch k is directly followed by the W of k - rank
        for i, a in enumerate(order):
            if a.phase == "B" and a.microbatch >= rank:
                assert order[i + 1] == Action(rank, "W", a.microbatch - rank)
        # the tail: after the last B come rank+1 W passes, filling 1F1B's drain bubble
        assert kinds[::-1].index("B") == min(rank + 1, m)


@pytest.mark.parametrize("pp, m", SHAPES)
def test_peak_memory_not_above_1f1b(pp: int, m: int) -> None:
    zb = build_schedule("zb-h1", pp, m)
    one_f_one_b = peak_inflight(build_schedule("1f1b", pp, m))
    assert peak_inflight(zb) == one_f_one_b == [min(pp - r, m) for r in range(pp)]
    # awaiting W: the same count on every stage, equal to 1F1B's first-stage peak
    assert peak_inflight(zb, release="W") == [max(one_f_one_b)] * pp


@pytest.mark.parametrize("pp, m", SHAPES)
def test_bubble_is_a_third_of_1f1b_with_equal_costs(pp: int, m: int) -> None:
    zb = execute_unit_costs(build_schedule("zb-h1", pp, m), f=1, b=1, w=1)
    one_f_one_b = execute_unit_costs(build_schedule("1f1b", pp, m), f=1, b=2)  # B+W fused
    assert zb.busy == one_f_one_b.busy
    zb_idle, ref_idle = zb.makespan - 3 * m, one_f_one_b.makespan - 3 * m
    assert ref_idle == 3 * (pp - 1)
    assert zb_idle == pp - 1          # (p-1)(T_F + T_B - T_W)
    if pp > 1:
        assert zb.bubble_fraction() < one_f_one_b.bubble_fraction()


def test_bubble_formula_for_unequal_costs() -> None:
    """(p-1)(T_F + T_B - T_W) holds whenever T_W <= T_F (measured on this order)."""
    for f, b, w in [(2, 2, 1), (3, 4, 2), (2, 3, 2), (4, 4, 4), (3, 1, 1)]:
        for pp in range(2, 9):
            for m in range(pp, 3 * pp):
                run = execute_unit_costs(build_schedule("zb-h1", pp, m), f=f, b=b, w=w)
                assert run.makespan == m * (f + b + w) + (pp - 1) * (f + b - w)


def test_bubble_stays_below_1f1b_with_fewer_microbatches_than_stages() -> None:
    for pp in range(2, 9):
        for m in range(1, pp):
            zb = execute_unit_costs(build_schedule("zb-h1", pp, m), f=1, b=1, w=1)
            ref = execute_unit_costs(build_schedule("1f1b", pp, m), f=1, b=2)
            assert zb.makespan < ref.makespan


def test_equals_interleaved_zero_bubble_with_one_chunk() -> None:
    for pp in range(1, 9):
        for m in range(pp, 3 * pp + 1, pp):
            assert (build_schedule("zb-h1", pp, m).orders
                    == build_schedule("interleaved-zb", pp, m, 1).orders)
