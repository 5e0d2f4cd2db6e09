"""Blocking pipeline P2P (``ParallelPlan.pipeline_p2p``): Megatron's batched send/receive is
waited for, with a device synchronize, before the next action (Megatron-LM 2021
megatron/p2p_communication.py: ``reqs = batch_isend_irecv(ops); req.wait(); torch.cuda.synchronize()``;
Megatron-Core r0.8.0 ``batch_p2p_sync`` whenever the schedule is not interleaved), so no compute
of a rank starts before its previous send has arrived; "async" sends run beside compute."""

from __future__ import annotations

import dataclasses

import pytest

from sim.job import resolve_job
from sim.simulate import simulate

BASE = {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 2, "pp": 4, "microbatches": 8}


def _run(pipeline_p2p: str, **kw: object):  # type: ignore[no-untyped-def]
    job = resolve_job({**BASE, **kw})
    return simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, pipeline_p2p=pipeline_p2p)))


def _compute_after_sends(result) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """(send end, start of the same rank's next compute) for every send of the timeline."""
    s = result.timeline.spans
    out = []
    for rank in s["rank"].unique():
        mine = s[s["rank"] == rank]
        compute = mine[mine["lane"] == "compute"].sort_values("start_s")
        for _, send in mine[mine["kind"] == "send"].iterrows():
            later = compute[compute["start_s"] >= send["start_s"] - 1e-12]
            if len(later):
                out.append((float(send["end_s"]), float(later["start_s"].iloc[0])))
    return out


def test_blocking_sends_finish_before_the_next_compute() -> None:
    pairs = _compute_after_sends(_run("blocking"))
    assert pairs and all(start >= end - 1e-12 for end, start in pairs)


def test_async_sends_overlap_compute_and_blocking_is_never_faster() -> None:
    blocking, asynchronous = _run("blocking"), _run("async")
    assert any(start < end - 1e-9 for end, start in _compute_after_sends(asynchronous))
    assert blocking.metrics.step_time_s >= asynchronous.metrics.step_time_s - 1e-12


@pytest.mark.parametrize(("schedule", "vpp", "blocking"), [("1f1b", 1, True), ("interleaved", 2, False)])
def test_auto_blocks_only_the_non_interleaved_schedules(schedule: str, vpp: int, blocking: bool) -> None:
    """Megatron-Core: "non-interleaved schedule does not support overlapping p2p communication"
    (arguments.py: overlap_p2p_comm forced off without interleaving; batch_p2p_sync on)."""
    plan = resolve_job({**BASE, "schedule": schedule, "vpp": vpp}).plan
    assert plan.pipeline_p2p == "auto" and plan.blocking_p2p is blocking
    assert dataclasses.replace(plan, framework="torch").blocking_p2p is False
