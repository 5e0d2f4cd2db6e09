"""The trainer's MoE layer under TP all-reduces its replicated parameters' partial gradients over
TP at REDUCE_GRAD, after the stage's last backward (schedules.passes.fsdp_reduce._moe_tp_sums):
the first of those sums waits for the backward's last block, as the gradient it sums is that
backward's (it had no dependency and ran at the step's start when no reduction preceded it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.job import resolve_job
from sim.simulate import simulate

PLAN = {"model": "qwen3-30b-a3b", "cluster": "dgx-h100", "nodes": 2, "tp": 2, "pp": 2, "ep": 2, "zero": 1,
        "framework": "torch", "global_batch": 32}


@pytest.mark.slow
def test_tp_gradient_sums_follow_the_last_backward() -> None:
    spans = simulate(dataclasses.replace(resolve_job(PLAN), exact=True)).timeline.spans
    names = spans["name"].astype(str)
    sums = spans[names.str.contains(".tp_grad_ar", regex=False)]
    assert len(sums) > 0
    backward = spans[(spans["lane"].astype(str) == "compute") & (spans["kind"].astype(str) == "bwd")
                     & (spans["microbatch"] >= 0)]
    for rank, group in sums.groupby("rank"):
        last_backward_end = float(backward[backward["rank"] == rank]["end_s"].max())
        assert float(group["start_s"].min()) >= last_backward_end - 1e-12


@pytest.mark.slow
def test_extended_step_equals_the_exact_one() -> None:
    job = resolve_job(dict(PLAN, pp=4, nodes=4, tp=4, global_batch=96))
    fast, exact = simulate(job), simulate(dataclasses.replace(job, exact=True))
    assert fast.steady_state is not None
    for field in ("step_time_s", "bubble_fraction", "comm_overlap_fraction"):
        assert np.isclose(getattr(fast.metrics, field), getattr(exact.metrics, field), rtol=1e-9, atol=1e-12)
