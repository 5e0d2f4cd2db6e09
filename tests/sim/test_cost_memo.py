""":class:`sim.costing.ByCost`: values kept by a priced task's identity (and the caller's key),
the task held so that its id is not reused, at most ``COST_MEMO_ENTRIES`` entries."""

from __future__ import annotations

import gc

import pytest

import sim.costing as costing
from sim.costing import ByCost, CostedTask


def test_made_once_per_task_and_key() -> None:
    memo: ByCost[float] = ByCost()
    a, b = CostedTask(1.0, ()), CostedTask(1.0, ())  # equal by value, two tasks
    made: list[float] = []

    def make(value: float) -> float:
        made.append(value)
        return value

    for task, key, want in ((a, 1, 10.0), (a, 1, 10.0), (a, 2, 20.0), (b, 1, 30.0)):
        assert memo.get(task, lambda: make(want), key) == want  # noqa: B023 - called at once
    assert made == [10.0, 20.0, 30.0] and len(memo) == 3


def test_the_task_is_held() -> None:
    memo: ByCost[int] = ByCost()
    memo.get(CostedTask(2.0, ()), lambda: 1)
    gc.collect()
    assert len(memo) == 1 and all(held[0].duration_s == 2.0 for held in memo._found.values())


def test_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costing, "COST_MEMO_ENTRIES", 3)
    memo: ByCost[int] = ByCost()
    for k in range(7):
        memo.get(CostedTask(float(k), ()), lambda: k)  # noqa: B023 - called at once
        assert len(memo) <= 3
