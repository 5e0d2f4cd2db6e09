"""``overlap_grad_reduce``: Megatron-LM's DDP reduces gradient buckets during the last backward
when on, and only after the whole schedule (``finalize_model_grads``) when off (it had no effect
before: the reductions always overlapped)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.job import resolve_job
from sim.simulate import simulate


def _run(zero: int, overlap: bool, pp: int = 1):  # type: ignore[no-untyped-def]
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 1, "pp": pp,
                       "global_batch": 64, "zero": zero, "dp_bucket_bytes": 200_000_000})
    job = dataclasses.replace(job, plan=dataclasses.replace(job.plan, overlap_grad_reduce=overlap))
    return simulate(job)


@pytest.mark.parametrize("zero", [0, 1])
def test_without_overlap_reductions_follow_the_schedule_in_series(zero: int) -> None:
    r = _run(zero, overlap=False)
    s = r.timeline.spans
    compute = s[(s["lane"] == "compute") & (s["kind"] != "optimizer")]
    grads = s[(s["lane"] == "comm.dp") & s["kind"].isin(["all_reduce", "reduce_scatter"])
              & ~s["name"].str.startswith("grad_norm")]  # the norm's all-reduce follows them (step_end_syncs)
    assert len(grads) > 1  # several buckets
    backward_end = float(compute["end_s"].max())
    assert float(grads["start_s"].min()) == pytest.approx(backward_end, abs=1e-12)
    # back to back on the DP stream: the last ends after the sum of their durations
    total = float((grads["end_s"] - grads["start_s"]).sum())
    assert float(grads["end_s"].max()) == pytest.approx(backward_end + total, rel=1e-12)
    optimizer = s[s["kind"] == "optimizer"]
    assert float(optimizer["start_s"].min()) >= float(grads["end_s"].max()) - 1e-12


@pytest.mark.parametrize(("zero", "pp"), [(0, 1), (1, 1), (1, 2)])
def test_overlap_never_slows_a_step_and_hides_reductions(zero: int, pp: int) -> None:
    on, off = _run(zero, overlap=True, pp=pp), _run(zero, overlap=False, pp=pp)
    assert on.metrics.step_time_s < off.metrics.step_time_s
    assert on.metrics.exposed_comm_fraction < off.metrics.exposed_comm_fraction
    assert np.isfinite(off.metrics.step_time_s)


def test_param_gathers_overlap_the_first_forward_bucket_by_bucket() -> None:
    # ZeRO-1 with overlap_param_gather (Megatron's forward pre-hooks wait per bucket): the first
    # forward's first block waits for its own bucket's all-gather only; later buckets arrive
    # while it computes
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 1, "pp": 1,
                       "global_batch": 64, "zero": 1, "dp_bucket_bytes": 200_000_000})
    s = simulate(dataclasses.replace(job, exact=True)).timeline.spans
    gathers = s[(s["lane"] == "comm.dp") & (s["kind"] == "all_gather")].sort_values("start_s")
    first_fwd = s[(s["lane"] == "compute") & (s["kind"] == "fwd") & (s["microbatch"] == 0)]
    assert len(gathers) > 2
    assert float(first_fwd["start_s"].min()) == pytest.approx(float(gathers["end_s"].iloc[0]), abs=1e-12)
    assert float(gathers["end_s"].max()) > float(first_fwd["start_s"].min())


@pytest.mark.parametrize("pp", [1, 2])
def test_zero3_without_overlap_runs_and_is_never_faster(pp: int) -> None:
    # it deadlocked: a reduction waiting for the schedule's end sat on the DP stream ahead of the
    # parameter gathers the rest of the schedule needed
    on, off = _run(3, overlap=True, pp=pp), _run(3, overlap=False, pp=pp)
    assert np.isfinite(off.metrics.step_time_s)
    assert on.metrics.step_time_s <= off.metrics.step_time_s
    s = off.timeline.spans
    grads = s[(s["lane"] == "comm.dp") & (s["kind"] == "reduce_scatter")]
    compute = s[(s["lane"] == "compute") & (s["kind"] != "optimizer")]
    assert float(grads["start_s"].min()) >= float(compute[compute["rank"] == 0]["end_s"].max()) - 1e-12 or pp > 1



def test_zero3_backward_issues_the_next_gather_before_this_reduction() -> None:
    # FSDP's backward prefetch: on the DP stream, block L-1's all-gather is issued before block
    # L's reduce-scatter, so a reduce-scatter waiting for its backward never holds back the
    # parameters the next backward block needs
    s = _run(3, overlap=True).timeline.spans
    dp = s[(s["lane"] == "comm.dp") & (s["rank"] == 0) & (s["step"] == 0)]
    checked = 0
    for mb in sorted(set(dp["microbatch"])):
        rs = dp[(dp["kind"] == "reduce_scatter") & (dp["microbatch"] == mb)]
        ag = dp[(dp["kind"] == "all_gather") & (dp["microbatch"] == mb)]
        ag_start = ag.groupby("layer")["start_s"].max().to_dict()  # the backward's (after the forward's)
        for layer, start in zip(rs["layer"], rs["start_s"], strict=True):
            if layer - 1 in ag_start:
                assert ag_start[layer - 1] <= start
                checked += 1
    assert checked > 10
