"""Megatron's interleaved 1F1B with blocking P2P runs in lock-step (the megatron-2021/2023 presets):
after each loop iteration (a warm-up forward, a forward and a backward, or a cool-down backward)
one batched call sends the iteration's outputs and receives the next iteration's inputs, waited
and followed by a device synchronize (Megatron-LM ``megatron/schedules.py`` @fda81a212b
l.228-350, ``p2p_communication.py`` l.108-112, 251-266). Megatron-Core's training CLI overlaps
these instead (``--no-overlap-p2p-communication`` is a store_false flag, core_v0.8.0
``megatron/training/arguments.py`` l.1405), which is the async mode."""

from __future__ import annotations

import dataclasses

import pytest

from schedules.actions import Action
from schedules.passes.p2p_torch import megatron_iterations
from schedules.pipeline import build_schedule
from schedules.pipeline.interleaved import build_interleaved
from sim.job import resolve_job
from sim.simulate import simulate


def _megatron_loop(pp: int, microbatches: int, vpp: int, rank: int) -> list[str]:
    """The phases of each iteration of Megatron-LM's interleaved loop (schedules.py @fda81a212b
    l.153-176, 237, 278, 346), restated: warm-up forwards, (forward, backward) pairs, cool-down
    backwards."""
    total = microbatches * vpp
    if microbatches == pp:
        warmup = total
    else:
        warmup = min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
    remaining = total - warmup
    return ["F"] * warmup + ["FB"] * remaining + ["B"] * (total - remaining)


def _iterations(order: tuple[Action, ...]) -> list[str]:
    firsts = megatron_iterations(order)
    groups: dict[int, str] = {}
    for index, action in enumerate(order):
        groups[firsts[index]] = groups.get(firsts[index], "") + str(action.phase)
    return list(groups.values())


@pytest.mark.parametrize("pp", [2, 4, 8])
@pytest.mark.parametrize("rounds", [1, 2, 3])
@pytest.mark.parametrize("vpp", [2, 3])
def test_iterations_are_megatron_lms_loop(pp: int, rounds: int, vpp: int) -> None:
    schedule = build_interleaved(pp, pp * rounds, vpp, variant="megatron")
    for rank, order in enumerate(schedule.orders):
        assert _iterations(order) == _megatron_loop(pp, pp * rounds, vpp, rank)


def test_an_order_that_is_not_interleaved_1f1b_is_refused() -> None:
    order = build_schedule("zbv", 4, 8, 2).orders[0]
    with pytest.raises(ValueError, match="interleaved 1F1B"):
        megatron_iterations(order)


BASE = {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 1, "tp": 2, "pp": 4, "dp": 1, "global_batch": 16,
        "schedule": "interleaved", "vpp": 2, "framework_preset": "megatron-2021"}


def _spans(**settings):
    job = resolve_job({**BASE, **settings})
    assert job.plan.blocking_p2p
    return simulate(dataclasses.replace(job, exact=True)).make_timeline().spans


def test_a_forward_output_leaves_after_the_backward_of_its_iteration() -> None:
    spans = _spans()
    for pp_rank in range(4):
        mine = spans[spans["rank"] == pp_rank * BASE["tp"]]  # tp innermost, dp 1
        order = build_interleaved(4, 16, 2, variant="megatron").orders[pp_rank]
        firsts = megatron_iterations(order)
        compute = mine[mine["lane"] == "compute"]
        sends = mine[mine["kind"] == "send"]
        recvs = mine[mine["kind"] == "recv"]
        checked = 0
        for index, action in enumerate(order):
            if firsts[index] != index or index + 1 >= len(order) or firsts[index + 1] != index:
                continue  # a steady-state (forward, backward) iteration
            forward, backward = action, order[index + 1]
            fwd = compute[(compute["kind"] == "fwd") & (compute["stage"] == forward.stage)
                          & (compute["microbatch"] == forward.microbatch)]
            bwd = compute[(compute["kind"] == "bwd") & (compute["stage"] == backward.stage)
                          & (compute["microbatch"] == backward.microbatch)]
            send = sends[(sends["stage"] == forward.stage) & (sends["microbatch"] == forward.microbatch)]
            grad_in = recvs[(recvs["stage"] == backward.stage) & (recvs["microbatch"] == backward.microbatch)]
            if len(send):
                assert send["start_s"].min() >= bwd["end_s"].max() - 1e-12  # posted after the backward
            if len(grad_in):
                assert grad_in["end_s"].max() <= fwd["start_s"].min() + 1e-12  # received before the forward
            checked += bool(len(send)) + bool(len(grad_in))
        assert checked > 0


def test_an_iteration_starts_when_every_send_and_receive_of_its_call_is_done() -> None:
    spans = _spans()
    for pp_rank in range(4):
        mine = spans[spans["rank"] == pp_rank * BASE["tp"]]
        p2p = mine[mine["lane"] == "comm.pp"]
        compute = mine[(mine["lane"] == "compute") & mine["kind"].isin(["fwd", "bwd"])]
        assert len(p2p) and len(compute)
        for start in sorted(set(p2p["start_s"])):  # one batched call per start time
            call_end = p2p[p2p["start_s"] == start]["end_s"].max()
            later = compute[compute["start_s"] >= start]
            assert later.empty or later["start_s"].min() >= call_end - 1e-12


@pytest.mark.parametrize(("settings", "extends"), [
    ({"global_batch": 64}, True),
    ({"schedule": "interleaved-megatron", "global_batch": 4}, False),  # m == p: all forwards first
    ({"vpp": 3, "pp": 8, "tp": 1, "global_batch": 96}, True),
    ({"framework_preset": "megatron-2023", "vpp": 3, "pp": 2, "tp": 4, "global_batch": 8}, False)])
def test_lockstep_steps_finish_and_extend_exactly(settings, extends) -> None:
    job = resolve_job({**BASE, **settings})
    exact = simulate(dataclasses.replace(job, exact=True)).metrics.step_time_s
    fast = simulate(job)
    assert (fast.steady_state is not None) == extends
    assert fast.metrics.step_time_s == pytest.approx(exact, rel=1e-9)


def test_lockstep_exposes_the_calls_an_async_pipeline_hides() -> None:
    """Without scatter/gather (whole messages over InfiniBand: GPT-3 18B, TP8, each stage on its
    own DGX A100) the lock-step step is slower than the same schedule with overlapped P2P."""
    base = {"model": "gpt3-18b", "cluster": "dgx-a100", "nodes": 4, "tp": 8, "pp": 4, "dp": 1, "global_batch": 16,
            "schedule": "interleaved", "vpp": 2, "framework_preset": "megatron-2021", "pipeline_scatter_gather": False}
    blocking = simulate(resolve_job(base)).metrics.step_time_s
    overlapped = simulate(resolve_job({**base, "pipeline_p2p": "async"})).metrics.step_time_s
    assert blocking > overlapped


def test_megatron_core_overlaps_its_interleaved_p2p() -> None:
    job = resolve_job({**BASE, "framework_preset": "megatron-core"})
    assert not job.plan.blocking_p2p
