"""Figures of an extended step from its 1- and 2-copy Timelines (sim.window_step) equal those read
from the full extended Timeline: every (rank, step) row, the metrics, each rank's memory peak,
its instant and categories, host-held activations, the span count and the compute FLOPs, and the
whole ``simulate --json`` object. The full Timeline is the ground truth: written by the same
extension, then measured span by span."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

import sim.window_step as window_step
from sim.job import resolve_job
from sim.memory_timeline import MemoryPeak
from sim.simulate import SimulationResult, simulate
from sim.summary import hardware_flops, summarize
from tests.sim.plan_sample import long_plan
from tests.sim.test_steady_state import BASE, CASES

FAST_CASES = 2


def _pair(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[SimulationResult, SimulationResult]:
    job = resolve_job(dict(BASE, **case))
    windowed = simulate(job)
    with monkeypatch.context() as m:
        m.setattr(window_step, "WORTH", 0.0)  # never worth it: the full Timeline is written and read
        full = simulate(job)
    return windowed, full


@pytest.mark.parametrize("case", [c if c < FAST_CASES else pytest.param(c, marks=pytest.mark.slow)
                                  for c in range(len(CASES))])
def test_window_figures_equal_the_full_timelines(case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    windowed, full = _pair(CASES[case], monkeypatch)
    assert full.window is None and "timeline" in full.__dict__
    if windowed.window is None:
        assert case >= FAST_CASES, "the quick cases (1F1B, interleaved) are figured from the window"
        pytest.skip("no window here (torch FSDP's pools, a period per group or phase, or torch's sends held "
                    "to the step's end, whose buffers grow with every copy)")
    assert "timeline" not in windowed.__dict__, "the Timeline is written only when read"
    step = full.metrics.step_time_s
    assert len(windowed.metrics.rank_rows) == len(full.metrics.rank_rows)
    for a, b in zip(windowed.metrics.rank_rows, full.metrics.rank_rows, strict=True):
        assert (a["rank"], a["step"], a["pp"]) == (b["rank"], b["step"], b["pp"])
        for key in ("step_time_s", "compute_s", "comm_s", "overlap_s", "exposed_comm_s", "idle_s"):
            assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-12 * step)
    for field in ("step_time_s", "bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction"):
        assert getattr(windowed.metrics, field) == pytest.approx(getattr(full.metrics, field), rel=1e-12, abs=1e-12)
    assert windowed.memory_peaks.keys() == full.memory_peaks.keys()
    for rank, peak in full.memory_peaks.items():
        _same_peak(windowed.memory_peaks[rank], peak, step)
        assert windowed.memory[rank].total == pytest.approx(full.memory[rank].total, rel=1e-12)
    assert windowed.host_activation_peak == pytest.approx(full.host_activation_peak, rel=1e-12)
    assert windowed.span_count == full.span_count
    assert windowed.simulated_ranks == full.simulated_ranks
    assert hardware_flops(windowed) == pytest.approx(hardware_flops(full), rel=1e-12)
    _same_json(summarize(windowed), summarize(full))
    assert "timeline" not in windowed.__dict__, "simulate --json reads no span of the full step"
    # reading the Timeline writes the spans the full path wrote, bit for bit
    assert windowed.timeline.spans.equals(full.timeline.spans)
    assert windowed.memory_timelines[0].peak_bytes == pytest.approx(full.memory_timelines[0].peak_bytes, rel=1e-12)


@pytest.mark.slow
def test_window_figures_on_a_seeded_sample_of_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same figures as the full Timeline's on 30 random plans with long runs of micro-batches
    (those the window serves: at least 10 of them)."""
    rng, checked, windowed = random.Random(29), 0, 0
    while checked < 30:
        try:
            job = resolve_job(long_plan(rng))
        except ValueError:
            continue
        checked += 1
        fast = simulate(job)
        if fast.window is None:
            continue
        windowed += 1
        with monkeypatch.context() as m:
            m.setattr(window_step, "WORTH", 0.0)
            full = simulate(job)
        _same_json(summarize(fast), summarize(full))
        for rank, peak in full.memory_peaks.items():
            _same_peak(fast.memory_peaks[rank], peak, full.metrics.step_time_s)
    assert windowed >= 10


def _same_json(a: Any, b: Any) -> None:
    """The same object, each number to one unit of its 9th significant digit (``--json`` rounds to
    9 digits; the unrounded figures agree to ~1e-12, checked above, and one sitting at a rounding
    boundary can flip its last digit: a 0.4% overlap fraction did, 0.00379133127 vs ...128)."""
    if isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _same_json(a[k], b[k])
    elif isinstance(b, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_json(x, y)
    elif isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-8, abs=1e-12)
    else:
        assert a == b


def _same_peak(a: MemoryPeak, b: MemoryPeak, step: float) -> None:
    assert a.bytes == pytest.approx(b.bytes, rel=1e-12)
    assert a.time_s == pytest.approx(b.time_s, abs=1e-12 * step)
    assert a.at_peak == pytest.approx(b.at_peak, rel=1e-12)


def test_short_steps_write_the_timeline() -> None:
    """Where the 1- and 2-copy steps would hold more than half the micro-batches, the full
    Timeline is written (the default job: 11 of 16 simulated)."""
    result = simulate(resolve_job({}))
    assert result.steady_state is not None and result.window is None
    assert "timeline" in result.__dict__


def test_a_window_that_does_not_grow_by_the_period_is_refused() -> None:
    row = {"rank": 0, "step": 0, "step_time_s": 1.0, "compute_s": 0.5, "comm_s": 0.2, "overlap_s": 0.1, "idle_s": 0.3}
    grown = dict(row, step_time_s=1.25, compute_s=0.6, comm_s=0.25, overlap_s=0.12, idle_s=0.4)
    rows = window_step._extended_rows([row], [grown], 10, 0.25, 1e-12)
    assert rows is not None
    assert rows[0]["step_time_s"] == pytest.approx(1.0 + 9 * 0.25)
    assert rows[0]["exposed_comm_s"] == pytest.approx(rows[0]["comm_s"] - rows[0]["overlap_s"])
    assert window_step._extended_rows([row], [dict(grown, step_time_s=1.3)], 10, 0.25, 1e-12) is None
    assert window_step._extended_rows([row], [dict(grown, compute_s=0.8)], 10, 0.25, 1e-12) is None  # > the period
    assert window_step._extended_rows([row], [dict(grown, rank=1)], 10, 0.25, 1e-12) is None


def test_a_peak_moves_with_the_copies_or_is_refused() -> None:
    at = {"activations": 2.0}
    first = {0: MemoryPeak(5.0, 3.0, at)}
    assert window_step._extended_peaks(first, {0: MemoryPeak(5.0, 3.0, at)}, 10, 0.5, 1e-12)[0].time_s == 3.0
    moved = window_step._extended_peaks(first, {0: MemoryPeak(5.0, 3.5, at)}, 10, 0.5, 1e-12)
    assert moved is not None and moved[0].time_s == pytest.approx(3.0 + 9 * 0.5)
    assert window_step._extended_peaks(first, {0: MemoryPeak(5.0, 3.2, at)}, 10, 0.5, 1e-12) is None
    assert window_step._extended_peaks(first, {0: MemoryPeak(6.0, 3.0, at)}, 10, 0.5, 1e-12) is None
    assert window_step._extended_peaks(first, {0: MemoryPeak(5.0, 3.0, {"activations": 3.0})}, 10, 0.5, 1e-12) is None


def test_host_held_activations_do_not_depend_on_round_off() -> None:
    """Activation offload: a copy back that starts as another copy out ends is one instant
    whichever way the round-off of the two times falls, so the extended step (times shifted by
    copies of the period) holds on the host what the fully simulated step does (it held one
    micro-batch's more on three of four stages when near-equal instants were kept apart)."""
    job = resolve_job(dict(BASE, **CASES[9]))
    exact = simulate(dataclasses.replace(job, exact=True))
    extended = simulate(job)
    assert extended.steady_state is not None and max(exact.host_activation_peak.values()) > 0
    assert extended.host_activation_peak == pytest.approx(exact.host_activation_peak, rel=1e-12)


def test_hbm_peak_does_not_depend_on_round_off() -> None:
    """An activation allocated as a communication buffer is freed is one instant, whichever way
    the round-off of the two times falls: the extended step's HBM peak is the fully simulated
    one's (it held a 18 MiB pipeline buffer on top of the peak in one of its copies before)."""
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 4, "tp": 1, "pp": 8, "dp": 4,
                       "global_batch": 512, "zero": 1, "framework": "torch", "recompute": "full"})
    exact = simulate(dataclasses.replace(job, exact=True))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(window_step, "WORTH", 0.0)  # the extended step's full Timeline
        extended = simulate(job)
    assert extended.steady_state is not None
    for rank, peak in exact.memory_peaks.items():
        _same_peak(extended.memory_peaks[rank], peak, exact.metrics.step_time_s)


def test_a_peak_between_the_parts_is_decided_by_the_one_copy_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1-copy step's peaks decide where the 2-copy step's fall between its parts (forced
    here on the 1F1B case): the same figures as the full Timeline's."""
    monkeypatch.setattr(window_step, "_carried_peaks", lambda *args: None)
    windowed, full = _pair(CASES[0], monkeypatch)
    assert windowed.window is not None
    for rank, peak in full.memory_peaks.items():
        _same_peak(windowed.memory_peaks[rank], peak, full.metrics.step_time_s)
        assert windowed.memory[rank].total == pytest.approx(full.memory[rank].total, rel=1e-12)


def test_peaks_carry_by_where_they_are_first_reached() -> None:
    parts = window_step._Parts(after_start=10.0, others_end=20.0)
    at = {"activations": 1.0}
    early, late, between = MemoryPeak(5.0, 9.0, at), MemoryPeak(5.0, 21.0, at), MemoryPeak(5.0, 15.0, at)
    assert window_step._carried_peaks({0: early}, parts, 12, 0.5) == {0: early}
    moved = window_step._carried_peaks({0: late}, parts, 12, 0.5)
    assert moved is not None and moved[0].time_s == pytest.approx(21.0 + 10 * 0.5)
    assert window_step._carried_peaks({0: early, 1: between}, parts, 12, 0.5) is None
