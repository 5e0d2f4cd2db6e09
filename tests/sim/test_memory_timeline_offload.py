"""Optimizer offload on the timeline: a 70B plan that does not fit in HBM fits with ZeRO-Offload,
and pays at least the closed-form PCIe copies and CPU Adam time (Ren et al. 2021)."""

from __future__ import annotations

import pytest

from schedules.plan import ParallelPlan
from schedules.stages import plan_stages
from sim.job import resolve_job
from sim.simulate import simulate
from sim.summary import summarize

# ZeRO-Offload is DeepSpeed's: gradients in the model's dtype (grad_reduce_dtype "compute")
PLAN = {"model": "llama3-70b", "cluster": "dgx-h100", "nodes": 1, "tp": 8, "pp": 1, "global_batch": 1,
        "sequence_parallel": True, "recompute": "full", "zero": 1, "grad_reduce_dtype": "compute"}


@pytest.fixture(scope="module")
def runs():
    cases = {"none": ("none", "cpu"), "optimizer": ("optimizer", "cpu"), "nvme": ("optimizer", "nvme")}
    return {key: simulate(resolve_job({**PLAN, "offload": off, "offload_device": dev}))
            for key, (off, dev) in cases.items()}


def _psi(job) -> float:
    """Parameters of one GPU (one TP rank of the single stage): ZeRO-1 over dp=1 keeps them all."""
    plan = ParallelPlan(tp=8, sequence_parallel=True, recompute="full", global_batch=1)
    return plan_stages(job.model, plan)[0].params_local


def _span_s(result, name: str) -> float:
    spans = result.timeline.spans
    part = spans[spans["name"].astype(str) == name]
    return float((part["end_s"] - part["start_s"]).sum())


def test_does_not_fit_without_offload_and_fits_with_it(runs):
    assert summarize(runs["none"])["fits"] is False
    s = summarize(runs["optimizer"])
    assert s["fits"] is True and s["memory_gib"]["optimizer"] == 0
    psi = _psi(runs["optimizer"].job)
    at_peak = s["memory_timeline"]["at_peak_gib"]
    assert at_peak["params"] == pytest.approx(2 * psi / 1024**3, abs=1e-3)  # 2 + 2 bytes/param stay
    assert at_peak["grads"] == pytest.approx(2 * psi / 1024**3, abs=1e-3)
    host = s["memory_timeline"]["host"]
    assert host["dram_gib_per_node"] == pytest.approx(8 * 14 * psi / 1024**3, abs=1e-2)  # 12 + 2 bytes/param


def test_step_grows_by_at_least_pcie_copies_and_cpu_adam(runs):
    cluster = runs["optimizer"].job.cluster
    psi = _psi(runs["optimizer"].job)
    # every GPU of the node copies at once; 2 GPUs share a PCIe switch uplink (topo/memory.py)
    pcie_GBps = min(cluster.pcie.effective_GBps / cluster.gpus_per_pcie_switch, cluster.host.dram_GBps / 8)
    grads_s = params_s = 2 * psi / (pcie_GBps * 1e9)
    adam_s = psi / (cluster.host.cpu_cores * cluster.host.cpu_adam_params_per_core_s / 8)
    off, base = runs["optimizer"], runs["none"]
    assert _span_s(off, "grad d2h") == pytest.approx(grads_s, rel=1e-6)
    assert _span_s(off, "param h2d") == pytest.approx(params_s, rel=1e-6)
    assert _span_s(off, "cpu adam") == pytest.approx(adam_s, rel=1e-6)
    # the GPU step the offload replaces: the gradient norm (its read, all-reduce and the host's
    # .item(): schedules.step_end_syncs), Adam and the zeroing of the fp32 gradient buffer (an
    # offloaded step keeps no such buffer on the GPU)
    gpu_adam_s = sum(_span_s(base, name) for name in ("grad_norm", "grad_norm.allreduce", "grad_norm.item",
                                                       "optimizer.step", "grad_buffer.zero"))
    assert _span_s(base, "grad_norm") > 0 and _span_s(off, "grad_norm") == 0
    assert _span_s(base, "grad_buffer.zero") > 0 and _span_s(off, "grad_buffer.zero") == 0
    growth = off.metrics.step_time_s - base.metrics.step_time_s
    assert growth >= grads_s + params_s + adam_s - gpu_adam_s - 1e-9


def test_nvme_is_slower_than_cpu_dram(runs):
    assert runs["nvme"].metrics.step_time_s > runs["optimizer"].metrics.step_time_s
    host = summarize(runs["nvme"])["memory_timeline"]["host"]
    assert host["nvme_gib_per_node"] > 0 and host["fits_nvme"]
