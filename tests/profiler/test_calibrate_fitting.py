"""Calibration fits recover known parameters from synthetic samples (closed forms)."""

from __future__ import annotations

import math

import pytest

from profiler.calibrate.fitting import binned_curve, fit_line, fit_scale, round_sig
from profiler.calibrate.microbench_fit import collective_fields, compute_fields
from topo.collective_ops import bus_factor


def test_round_sig() -> None:
    assert round_sig(123456.0) == 123500.0
    assert round_sig(0.000123456) == 0.0001235
    assert round_sig(0.0) == 0.0
    assert round_sig(-2.71828, 3) == -2.72


def test_fit_line_recovers_intercept_and_slope() -> None:
    x = [1e3, 1e4, 1e5, 1e6]
    fit = fit_line(x, [2e-5 + 3e-9 * v for v in x])
    assert fit.params[0] == pytest.approx(2e-5, rel=1e-9)
    assert fit.params[1] == pytest.approx(3e-9, rel=1e-9)
    assert fit.samples == 4 and fit.rel_error == pytest.approx(0.0, abs=1e-12)


def test_fit_line_clamps_negative_intercept() -> None:
    x = [1.0, 2.0, 3.0]
    fit = fit_line(x, [0.5, 1.5, 2.5])  # exact line has intercept -0.5
    assert fit.params[0] == 0.0 and fit.params[1] > 0


def test_fit_scale_per_item_cost_on_top_of_a_base() -> None:
    n, base = [10, 20, 40], [1.0, 2.0, 3.0]
    fit = fit_scale(n, [b + 0.25 * k for b, k in zip(base, n, strict=True)], base)
    assert fit.params[0] == pytest.approx(0.25)
    assert fit.rel_error == pytest.approx(0.0, abs=1e-12)
    assert fit_scale([1, 2], [0.0, 0.0], [1.0, 1.0]).params[0] == 0.0  # never negative


def test_binned_curve_is_monotone_in_x() -> None:
    xs, ys = binned_curve([8, 1, 4, 2, 16, 32], [0.8, 0.1, 0.4, 0.2, 0.9, 1.0], bins=3)
    assert xs == sorted(xs) and len(xs) == 3
    assert xs[0] == pytest.approx(math.sqrt(2)) and ys[0] == pytest.approx(0.15)


def _gemm(m: int, k: int, n: int, rate: float) -> dict:
    flops = 2.0 * m * k * n
    return {"bench": "gemm", "m": m, "k": k, "n": n, "flops": flops, "seconds": flops / rate}


def test_compute_fields_recover_rates() -> None:
    samples = [_gemm(128, 256, 256, 50e9), _gemm(512, 1024, 1024, 100e9)]
    samples += [{"bench": "attention", "heads": 8, "seq": 128, "head_dim": 64, "flops": 1e7, "seconds": 1e7 / 25e9}]
    samples += [{"bench": "elementwise", "numel": n, "bytes": 12.0 * n, "seconds": 5e-6 + 12.0 * n / 20e9}
                for n in (1 << 12, 1 << 16, 1 << 20)]
    fields, fits = compute_fields(samples)
    assert fields["peak_fp32_flops"] == pytest.approx(100e9)
    assert fields["gemm_efficiency"] == pytest.approx(1.0)
    assert fields["gemm_curve_efficiency"] == pytest.approx([0.5, 1.0])
    assert fields["attention_efficiency"] == pytest.approx(0.25)
    assert fields["hbm_GBps"] == pytest.approx(20.0, rel=1e-3)
    assert fields["kernel_overhead_s"] == pytest.approx(5e-6, rel=1e-3)
    assert fits["device.hbm_GBps"].samples == 3


def test_collective_fields_recover_alpha_and_bus_bandwidth() -> None:
    alpha, busbw = 2e-4, 1.5e9
    samples = [{"bench": "collective", "op": op, "ranks": n, "bytes": s, "backend": "gloo",
                "seconds": alpha + s * bus_factor(op, n) / busbw}
               for op in ("all_reduce", "all_gather") for n in (2, 4) for s in (4096, 1 << 20, 4 << 20)]
    fits, info = collective_fields(samples, "shm")
    assert len(fits) == 4
    for fit in fits:
        assert fit.alpha_s == pytest.approx(alpha, rel=1e-3)
        assert fit.busbw_GBps == pytest.approx(1.5, rel=1e-3)
        assert fit.link == "shm" and fit.algorithm == "gloo"
        assert fit.time_s(1 << 20, fit.ranks) == pytest.approx(alpha + (1 << 20) * bus_factor(fit.op, fit.ranks) / busbw,
                                                              rel=1e-3)
    assert info["collectives.all_reduce.shm.4"].samples == 3


def test_memory_fields_find_the_cache_level() -> None:
    from profiler.calibrate.microbench_fit import memory_fields

    cache, fast, slow, overhead = 4 << 20, 50e9, 8e9, 4e-6
    samples = [{"bench": "elementwise", "numel": b // 12, "bytes": float(b),
                "seconds": overhead + min(b, cache) / fast + max(0, b - cache) / slow}
               for b in (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28)]
    fields, fits = memory_fields(samples)
    assert fields["cache_GBps"] == pytest.approx(50.0, rel=0.05)
    assert fields["hbm_GBps"] == pytest.approx(8.0, rel=0.05)
    assert fields["kernel_overhead_s"] == pytest.approx(overhead, rel=0.1)
    assert 2 << 20 <= fields["cache_bytes"] <= 8 << 20
    assert fits["device.cache_bytes"].samples == 8


def test_host_fields_from_concurrent_processes() -> None:
    from profiler.calibrate.microbench_fit import host_fields

    samples = [{"bench": "memory_streams", "processes": 1, "rates": [10e9]},
               {"bench": "memory_streams", "processes": 2, "rates": [6e9, 7e9]},
               {"bench": "compute_streams", "processes": 1, "rates": [100.0]},
               {"bench": "compute_streams", "processes": 2, "rates": [80.0, 90.0]},
               {"bench": "compute_streams", "processes": 4, "rates": [40.0, 40.0, 40.0, 45.0]}]
    fields, _ = host_fields(samples)
    assert fields["dram_GBps"] == pytest.approx(13.0)  # median of the shared runs (one here)
    assert fields["compute_capacity"] == pytest.approx(1.675)  # median(170, 165) / 100 alone


def test_fit_nonnegative_recovers_coefficients_and_drops_negative_ones() -> None:
    import numpy as np

    from profiler.calibrate.fitting import fit_nonnegative

    n_ops = np.array([100.0, 200.0, 400.0, 800.0])
    n_actions = np.array([8.0, 8.0, 16.0, 32.0])
    ones = np.ones(4)
    y = 0.01 * ones + 1e-3 * n_actions + 5e-5 * n_ops
    values, err = fit_nonnegative({"setup": ones, "action": n_actions, "op": n_ops}, y)
    assert values == pytest.approx({"setup": 0.01, "action": 1e-3, "op": 5e-5})
    assert err == pytest.approx(0.0, abs=1e-9)
    values, _ = fit_nonnegative({"setup": ones, "op": n_ops}, 0.02 - 1e-6 * n_ops)  # negative slope
    assert values["op"] == 0.0 and values["setup"] > 0
