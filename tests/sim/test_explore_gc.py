"""A sweep's plans are evaluated with Python's cyclic collector paused (``Evaluator.evaluate_one``,
:mod:`sim.gc_pause`: a plan's graph is ~10^5 acyclic objects the collector would walk again and
again): the same rows as with the collector running, on a seeded sample of plans."""

from __future__ import annotations

import contextlib
import gc
import random

import pytest

from sim.explore import evaluate
from sim.explore.evaluate import Evaluator
from sim.explore.spec import SweepSpec
from sim.explore.sweep import plan_sweep


def test_paused_collector_gives_the_same_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SweepSpec(model="llama3-8b", tokens=1e9, global_batch=64, clusters=("dgx-h100",), gpus=(32,))
    plan = plan_sweep(spec)
    sample = random.Random(29).sample(plan.members, min(6, len(plan.members)))
    paused = Evaluator()
    fast = [paused.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in sample]
    assert gc.isenabled(), "the collector runs again after each plan"
    monkeypatch.setattr(evaluate, "gc_paused", contextlib.nullcontext)
    running = Evaluator()
    assert fast == [running.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in sample]


def test_frozen_survivors_give_the_same_rows_and_only_in_an_owned_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process trainsim owns, what each plan leaves alive moves out of the collector's
    sight (``gc.freeze``): the same rows; a library caller's collector is left as it was."""
    from sim import gc_pause

    spec = SweepSpec(model="llama3-8b", tokens=1e9, global_batch=64, clusters=("dgx-h100",), gpus=(32,))
    plan = plan_sweep(spec)
    sample = random.Random(7).sample(plan.members, min(6, len(plan.members)))
    frozen_before = gc.get_freeze_count()
    plain = [Evaluator().evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in sample]
    assert gc.get_freeze_count() == frozen_before, "a library caller's collector is not touched"
    monkeypatch.setattr(gc_pause, "_OWNED", [True])
    try:
        owned = Evaluator()
        rows = [owned.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in sample]
        assert gc.get_freeze_count() > frozen_before
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    assert rows == plain
