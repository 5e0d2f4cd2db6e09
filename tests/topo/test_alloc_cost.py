"""First touch of freshly allocated memory (op class "alloc", device.alloc_GBps) and its fit."""

from __future__ import annotations

import dataclasses

import pytest

from profiler.calibrate.microbench_fit import alloc_rate, compute_fields
from topo import get_device
from topo.compute import alloc_time_s


def test_alloc_costs_bytes_over_the_rate_and_nothing_without_one() -> None:
    gpu = get_device("h100-sxm")
    assert gpu.alloc_GBps == 0 and alloc_time_s(gpu, 1e9) == 0.0
    cpu = dataclasses.replace(get_device("cpu-host"), alloc_GBps=2.0)
    assert alloc_time_s(cpu, 4e9) == pytest.approx(2.0)


def test_alloc_rate_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="alloc_GBps"):
        dataclasses.replace(get_device("cpu-host"), alloc_GBps=-1.0)


def _fresh(numel: int, reused_s: float, rate_GBps: float) -> dict:
    out = 4.0 * numel
    return {"bench": "fresh", "numel": numel, "out_bytes": out, "seconds_reused": reused_s,
            "seconds": reused_s + out / (rate_GBps * 1e9)}


def test_fit_recovers_the_first_touch_rate() -> None:
    samples = [_fresh(1 << n, (1 << n) * 4 / 10e9, 1.6) for n in (18, 20, 22, 24)]
    fields, fits = compute_fields(samples)
    assert fields["alloc_GBps"] == pytest.approx(1.6, rel=1e-3)
    assert fits["device.alloc_GBps"].samples == 4 and fits["device.alloc_GBps"].rel_error < 1e-3


def test_no_extra_time_means_no_alloc_cost() -> None:
    """A caching allocator (GPU): the fresh and reused times are the same."""
    samples = [{"bench": "fresh", "numel": 1 << n, "out_bytes": 4.0 * (1 << n), "seconds": 1e-3,
                "seconds_reused": 1e-3} for n in (18, 20)]
    assert alloc_rate(samples)[0] == 0.0
