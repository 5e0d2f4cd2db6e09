"""What the Megatron-runtime stacks do to a gradient bucket before reducing it
(schedules/grad_bucket_ops.py): the 1/DP scaling pass (Megatron-LM 2021 distributed.py
``buffer_.data /=``, Megatron-Core r0.8.0 ``grad_data *= gradient_scaling_factor``, DeepSpeed
v0.6.2 ``mul_``/``div_``) and Megatron-Core's NaN check (``grad_data.norm(p=2)`` then
``assert not norm.isnan()``), on the stream the stack issues them from."""

from __future__ import annotations

import pytest

from core.vocab import Lane
from sim.job import resolve_job
from sim.simulate import simulate


def _spans(preset: str, **settings: object):  # type: ignore[no-untyped-def]
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 2, "pp": 2,
                       "microbatches": 4, "framework_preset": preset, **settings})
    result = simulate(job)
    return job, result.timeline.spans


def test_megatron_core_checks_then_scales_every_bucket_on_the_compute_stream() -> None:
    job, spans = _spans("megatron-core")
    rank = spans[spans["rank"] == spans["rank"].min()]
    names = list(rank["name"])
    norms, scales = rank[rank["name"] == "grad.nan_norm"], rank[rank["name"] == "grad.scale"]
    reductions = rank[rank["name"].str.match(r"grad_(ar|rs) ")]
    assert len(norms) == len(scales) == len(reductions) >= 1
    assert set(scales["lane"].astype(str)) == {str(Lane.COMPUTE.value)}
    assert names.index("grad.nan_norm") < names.index("grad.scale")
    params = job.plan.grad_reduce_bytes  # bytes per gradient element: fp32 under Megatron-Core with bf16
    assert params == 4
    assert (scales["bytes"].to_numpy() == 2 * norms["bytes"].to_numpy()).all()
    stage_params = sum(norms["bytes"]) / params
    assert stage_params == pytest.approx(job.model.num_params() / 4, rel=0.05)  # TP2 x PP2: a quarter


def test_nemo_checks_for_nan_and_averages_in_the_collective() -> None:
    """NeMo's recipes: check_for_nan_in_grad=True, average_in_collective=True (no scaling pass)."""
    _, spans = _spans("nemo")
    assert (spans["name"] == "grad.nan_norm").any() and not (spans["name"] == "grad.scale").any()


def test_2021_megatron_scales_without_a_nan_check_and_torch_does_neither() -> None:
    _, spans = _spans("megatron-2021")
    assert (spans["name"] == "grad.scale").any() and not (spans["name"] == "grad.nan_norm").any()
    _, spans = _spans("torchtitan", tp=1, pp=1)
    assert not spans["name"].isin(["grad.scale", "grad.nan_norm"]).any()


def test_the_passes_cost_at_least_their_bytes_at_hbm_speed() -> None:
    job, spans = _spans("megatron-core")
    device = job.cluster.device
    scale = spans[spans["name"] == "grad.scale"]
    seconds = (scale["end_s"] - scale["start_s"]).to_numpy()
    floor = scale["bytes"].to_numpy() / (device.hbm_GBps * 1e9)
    assert (seconds >= floor * 0.999).all()



def test_zero3_reductions_carry_no_scaling_pass() -> None:
    """DeepSpeed's ZeRO-2/3 division runs on its reduction stream in every micro-batch: not modelled."""
    _, spans = _spans("deepspeed", zero=3, tp=1, pp=1)
    assert not (spans["name"] == "grad.scale").any()
