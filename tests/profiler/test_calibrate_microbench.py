"""The microbenchmarks run on this machine (CPU/gloo) and report what they ran."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from profiler.calibrate.collective_bench import collective_cases, run_group  # noqa: E402
from profiler.calibrate.compute_bench import compute_cases, run_case  # noqa: E402
from profiler.calibrate.probe import speed_probe, speed_ratio  # noqa: E402
from profiler.calibrate.quiet import BackgroundMonitor, background_cores  # noqa: E402


def test_compute_cases_report_their_work() -> None:
    cpu = torch.device("cpu")
    gemm = run_case("gemm", (64, 128, 256), cpu, reps=2)
    assert gemm["flops"] == 2 * 64 * 128 * 256 and gemm["seconds"] > 0
    add = run_case("elementwise", (4096,), cpu, reps=2)
    assert add["bytes"] == 3 * 4096 * 4 and add["seconds"] > 0
    attention = run_case("attention", (4, 32, 16), cpu, reps=2)
    assert attention["flops"] == 4 * 32 * 32 * 4 * 16 * 0.5
    fresh = run_case("fresh", (1 << 18,), cpu, reps=2)
    assert fresh["out_bytes"] == 4 * (1 << 18) and fresh["seconds"] > 0 and fresh["seconds_reused"] > 0
    assert {b for b, _ in compute_cases()} == {"gemm", "attention", "elementwise", "fresh"}


@pytest.mark.slow
def test_collective_sweep_on_two_gloo_ranks() -> None:
    seen = []
    samples = run_group(2, [("all_reduce", 4096), ("reduce_scatter", 8192), ("p2p", 4096)], reps=1,
                        on_progress=seen.append, timeout_s=300)
    assert [(s["op"], s["bytes"], s["ranks"]) for s in samples] == [
        ("all_reduce", 4096, 2), ("reduce_scatter", 8192, 2), ("p2p", 4096, 2)]
    assert all(s["seconds"] > 0 and s["backend"] == "gloo" for s in samples)
    assert seen == [1, 2, 3]


def test_p2p_only_on_pairs() -> None:
    assert ("p2p", 4096) not in collective_cases(4)
    assert ("p2p", 4096) in collective_cases(2)


def test_probe_and_background_monitor() -> None:
    probe = speed_probe(0.2)
    assert 0 < probe < 1.0
    assert speed_ratio(2 * probe, probe) == pytest.approx(2.0)
    assert speed_ratio(None, probe) == 1.0
    assert background_cores(0.2) >= 0.0
    monitor = BackgroundMonitor(interval_s=0.05).start()
    sum(i * i for i in range(200_000))  # our own work is not background
    assert monitor.stop() >= 0.0 and monitor.wall_s > 0
