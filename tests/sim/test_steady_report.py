"""``simulate --json`` says how many micro-batches were simulated, and why all of them when the
step was not extended from a shorter one (sim.summary.steady_state_summary)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sim.job import resolve_job
from sim.simulate import simulate
from sim.steady_state import NoPeriod
from sim.summary import summarize

BASE = {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 4, "tp": 4, "pp": 4, "global_batch": 256}


def _steady(settings: dict[str, Any], **job: Any) -> dict[str, Any]:
    result = simulate(dataclasses.replace(resolve_job(settings), **job))
    out: dict[str, Any] = summarize(result)["simulation"]["steady_state"]
    return out


def test_an_extended_step_reports_what_was_simulated() -> None:
    s = _steady(BASE)
    assert s["microbatches"] == 128 and s["fallback"] is None
    assert s["simulated_microbatches"] < 128 and s["period_microbatches"] == 1
    assert s["simulated_microbatches"] + s["copies"] * s["period_microbatches"] == 128


@pytest.mark.parametrize(("settings", "job", "why"), [
    (BASE, {"exact": True}, "--exact"),
    (dict(BASE, global_batch=32), {}, "too few micro-batches"),
    (dict(BASE, jitter_cv=0.01), {}, "simpy engine"),
    (dict(BASE, steps=2), {}, "2 steps are simulated whole"),
])
def test_a_whole_step_says_why(settings: dict[str, Any], job: dict[str, Any], why: str) -> None:
    s = _steady(settings, **job)
    assert s["simulated_microbatches"] == s["microbatches"] and s["copies"] == 0
    assert why in s["fallback"]


def test_no_period_names_the_steps_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.simulate

    monkeypatch.setattr(sim.simulate, "steady_run", lambda *a, **k: NoPeriod((37, 72)))  # no shorter step shows a period
    s = _steady(BASE)
    assert s["simulated_microbatches"] == 128
    assert s["fallback"] == "no period repeats in the shorter steps tried (37, 72 micro-batches)"
