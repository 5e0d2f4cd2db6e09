"""Shared resources keep advancing time when simulated time is large (issue 15: the engine's
absolute 1e-12 s tolerance froze time past ~1e4 s: the work left fell below one ulp of now)."""

from __future__ import annotations

import math
import multiprocessing

import numpy as np
import pytest
import simpy

from sim.cores import SharedCores
from sim.flow.maxmin import incidence_of
from sim.flow.network import FlowNetwork
from sim.fluid import EPS, time_resolution_s


def test_the_resolution_is_absolute_near_zero_and_relative_later() -> None:
    assert time_resolution_s(0.0) == EPS
    assert time_resolution_s(1.0) == EPS
    assert time_resolution_s(1e6) == pytest.approx(1e-6)
    # far above one ulp of now, so now + resolution > now
    for now in (1e4, 1e6, 1e9):
        assert time_resolution_s(now) > 100 * math.ulp(now)


def _shared_cores_finish(jobs: list[tuple[float, float]]) -> list[float]:
    env = simpy.Environment()
    cores = SharedCores(env, 1.0)
    out = [math.nan] * len(jobs)

    def job(i: int, start: float, work: float):  # type: ignore[no-untyped-def]
        yield env.timeout(start)
        yield cores.run(work, 0)
        out[i] = env.now

    for i, (start, work) in enumerate(jobs):
        env.process(job(i, start, work))
    env.run()
    return out


def _in_child(fn, *args):  # type: ignore[no-untyped-def]
    """Run ``fn(*args)`` in a child process killed after 60 s (a livelock fails, not hangs)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        return pool.apply_async(fn, args).get(timeout=60)


def test_processor_sharing_over_a_million_seconds() -> None:
    # one core; A (1e6 s of work) alone for 3e5 s, then A and B (2e5 s) share at 1/2 each:
    # B ends at 3e5 + 4e5 = 7e5, A has 1e6 - 3e5 - 2e5 = 5e5 left alone: ends at 1.2e6
    a, b = _in_child(_shared_cores_finish, [(0.0, 1e6), (3e5, 2e5)])
    assert a == pytest.approx(1.2e6, rel=1e-9)
    assert b == pytest.approx(7e5, rel=1e-9)


@pytest.mark.slow
def test_many_short_jobs_late_in_a_long_run() -> None:
    # 1000 jobs of 1/3 s each, starting after 1e6 s on a shared core: they run back to back
    # in pairs; all of them fit in the expected total, and time keeps advancing
    jobs = [(1e6 + k / 7, 1 / 3) for k in range(1000)]
    ends = _in_child(_shared_cores_finish, jobs)
    assert max(ends) == pytest.approx(1e6 + 1000 / 3, rel=1e-9)


def _flow_finish(start_s: float, nbytes: float) -> float:
    env = simpy.Environment()
    net = FlowNetwork(env, np.array([3e9]))
    out = [math.nan]

    def go():  # type: ignore[no-untyped-def]
        yield env.timeout(start_s)
        yield net.transfer(incidence_of([(0,), (0,)]), np.array([nbytes, nbytes / 3]))
        out[0] = env.now

    env.process(go())
    env.run()
    return out[0]


def test_flow_network_after_a_million_seconds() -> None:
    # two flows on one 3 GB/s link: the short one (1/4 of the bytes) finishes first at 1.5 GB/s
    # each, then the long one alone: total = (n + n/3) / 3e9 seconds after the start
    n = 7.0e9
    assert _in_child(_flow_finish, 1e6, n) == pytest.approx(1e6 + (n + n / 3) / 3e9, rel=1e-12)


def _simulate_json(argv: list[str]) -> float:
    import contextlib
    import io
    import json

    from sim.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", *argv, "--json", "--no-report"]) == 0
    return float(json.loads(out.getvalue())["step_time_s"])


@pytest.mark.parametrize("argv", [
    # the reproducers: a 70B step on a CPU host takes ~5e4 simulated seconds (--pp 1: the
    # reproducer's plan; flags now modify the default job, whose pp 2 does not fit 2 CPU "GPUs")
    ["--model", "llama3-70b", "--cluster", "cpu-host", "--tp", "2", "--pp", "1", "--global-batch", "2"],
    ["--model", "llama3-8b", "--pp", "2", "--dp", "12", "--cluster", "dgx-a100",
     "--profile", "profiles/this-host.toml"],
])
def test_long_simulated_steps_return(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    step = _in_child(_simulate_json, argv)
    assert math.isfinite(step) and step > 1e4
