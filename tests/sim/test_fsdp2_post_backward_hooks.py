"""FSDP2's post-backward hooks reduce each block's gradients as soon as the block's backward ends
(framework="torch", ZeRO-2/3, no pipeline parallelism): ``RegisterPostBackwardFunction`` on a
block's forward inputs calls ``FSDPParamGroup.post_backward`` when the block's input gradients are
computed, which reduce-scatters on the reduce-scatter stream
(torch/distributed/_composable/fsdp/_fsdp_param_group.py, 2024); the root, whose inputs are token
ids, is reduced in the final callback (``_root_post_backward_final_callback``); torchtitan runs a
plain ``loss.backward()`` without PP (train.py@9dec370). Under ``torch.distributed.pipelining``
(pp > 1, and the included trainer, a one-stage pipeline even without PP) the stage defers the
reduction to after its last backward (``REDUCE_GRAD``). Without pipelining nothing turns gradient
sync off between micro-batches (Composer's ``ddp_sync_context`` returns at once for a model that
is not DDP, composer/distributed/dist_strategy.py), so every micro-batch's backward reduces."""

from __future__ import annotations

from typing import Any

import pandas as pd

from profiler.validate.job import plan_for_run
from sim.job import resolve_job
from sim.simulate import simulate


def _rank0(**settings: Any) -> pd.DataFrame:
    base: dict[str, Any] = dict(model="gpt3-1.7b", cluster="dgx-h100", nodes=1, tp=1, pp=1, dp=8, zero=3,
                                framework="torch", microbatch_size=2, global_batch=16)
    job = resolve_job({**base, **settings})
    spans = simulate(job).timeline.spans
    return spans[spans["rank"] == 0]


def _backward_compute(rank0: pd.DataFrame) -> pd.DataFrame:
    """The blocks' backward compute spans (not the FSDP copies around them)."""
    bwd = rank0[(rank0["lane"] == "compute") & (rank0["kind"] == "bwd") & (rank0["layer"] >= 0)]
    return bwd[~bwd["name"].str.contains("post_backward|param_copy|prefetch|grad_scale")]


def _reduce_scatters(rank0: pd.DataFrame) -> pd.DataFrame:
    return rank0[(rank0["lane"] == "comm.dp") & (rank0["kind"] == "reduce_scatter")]


def test_each_blocks_reduce_scatter_runs_under_the_next_blocks_backward() -> None:
    rank0 = _rank0()
    bwd, rs = _backward_compute(rank0), _reduce_scatters(rank0)
    layers = sorted(int(x) for x in bwd["layer"].unique())
    assert len(layers) == 24
    end_of = bwd.groupby("layer")["end_s"].max()
    start_rs = rs.set_index("layer")["start_s"]
    for layer in layers[1:]:  # block `layer`'s gradients are reduced while block layer-1 computes its backward
        assert end_of[layer] <= start_rs[layer] < end_of[layer - 1]
    # the root (embedding, final norm, head) in the final callback, after the last block's backward
    assert start_rs[-1] >= end_of.min()
    # backward runs in reverse layer order, and so do the blocks' reduce-scatters
    ordered = rs.sort_values("start_s")["layer"].tolist()
    assert ordered == [*reversed(layers), -1]


def test_pipelining_defers_the_reduction_to_after_the_last_backward() -> None:
    for settings in (dict(overlap_grad_reduce=False), dict(pp=2, dp=4, global_batch=16)):
        rank0 = _rank0(**settings)
        last_backward = _backward_compute(rank0)["end_s"].max()
        rs = _reduce_scatters(rank0)
        assert len(rs) > 0
        assert rs["start_s"].min() >= last_backward, settings


def test_hooks_take_the_reduction_off_the_step_tail() -> None:
    hooks, deferred = _rank0(), _rank0(overlap_grad_reduce=False)
    last_hooks = _backward_compute(hooks)["end_s"].max()
    tail = float(hooks["end_s"].max() - last_hooks)
    deferred_tail = float(deferred["end_s"].max() - _backward_compute(deferred)["end_s"].max())
    assert tail < deferred_tail  # only the root's reduction (and the optimizer) follow the backward


def test_the_included_trainer_is_a_one_stage_pipeline() -> None:
    # profiler/trainer/pipeline.py: "A model without pipeline parallelism is a one-stage pipeline"
    config = dict(schedule="1f1b", tp=1, pp=1, dp=4, vpp=1, microbatch_size=1, global_batch=4, zero=3)
    assert plan_for_run(config, "fp32").overlap_grad_reduce is False


def test_every_microbatch_backward_reduces_without_pipelining() -> None:
    microbatches = 4
    hooks = _rank0(global_batch=16 * microbatches)
    rs = _reduce_scatters(hooks)
    assert rs.groupby("layer").size().to_dict() == {u: microbatches for u in range(-1, 24)}
    # each micro-batch's reductions are issued during its own backward, before the next forward
    fwd = hooks[(hooks["lane"] == "compute") & (hooks["kind"] == "fwd")]
    for mb in range(microbatches - 1):
        next_forward = fwd[fwd["microbatch"] == mb + 1]["start_s"].min()
        assert (rs["start_s"] < next_forward).sum() >= 24 * (mb + 1)
    deferred = _reduce_scatters(_rank0(global_batch=16 * microbatches, overlap_grad_reduce=False))
    assert deferred.groupby("layer").size().to_dict() == {u: 1 for u in range(-1, 24)}


def test_on_a_cpu_host_the_backward_waits_for_each_reduce_scatter() -> None:
    # gloo runs a collective called without async_op to completion before returning (FSDP2's
    # foreach_reduce calls reduce_scatter_tensor so), so the next block's backward starts after it
    rank0 = _rank0(model="tiny", cluster="cpu-host", dp=2, microbatch_size=1, global_batch=2)
    bwd, rs = _backward_compute(rank0), _reduce_scatters(rank0)
    start_of = bwd.groupby("layer")["start_s"].min()
    end_rs = rs.set_index("layer")["end_s"]
    layers = sorted(int(x) for x in bwd["layer"].unique())
    assert len(layers) > 1
    for layer in layers[1:]:
        assert start_of[layer - 1] >= end_rs[layer]
