"""Compute beside communication kernels: the correction's arithmetic and its effect on a step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.groups import TP
from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass
from sim import intervals
from sim.costing import layout_ops
from sim.interference import slowed_durations, task_slowdown
from sim.job import resolve_job
from sim.simulate import simulate
from topo import get_cluster
from topo.gemm_shape import GemmShape
from topo.interference import gemm_slowdown, hbm_slowdown


def test_overlap_of_each_interval_with_a_union() -> None:
    union = intervals.union([0.0, 5.0, 10.0], [2.0, 7.0, 12.0])
    got = intervals.overlap_each([1.0, 3.0, 6.0, -1.0, 11.0], [6.0, 4.0, 11.0, 20.0, 11.5], union)
    assert got.tolist() == pytest.approx([2.0, 0.0, 2.0, 6.0, 0.5])


def test_only_the_overlapped_part_is_slowed() -> None:
    # rank 0: compute [0, 10] with comm over [6, 10] -> 10 + 4 x 0.5; rank 1's comm does not count
    rank = np.array([0, 0, 1])
    compute = np.array([True, False, False])
    comm = ~compute
    start, end = np.array([0.0, 6.0, 0.0]), np.array([10.0, 12.0, 10.0])
    out = slowed_durations(rank, compute, comm, start, end, end - start, np.array([1.5, 1.0, 1.0]))
    assert out.tolist() == pytest.approx([12.0, 6.0, 10.0])


def test_task_slowdown_weighs_its_ops() -> None:
    device = get_cluster("dgx-h100").device
    gemm = Op(Lane.COMPUTE, Kind.FWD, "mm", OpClass.GEMM, flops=2.0 * 8192 * 4096 * 4096, m=8192, n=4096, k=4096)
    ew = Op(Lane.COMPUTE, Kind.FWD, "ew", OpClass.ACTIVATION, bytes=1e9)
    tp = Op(Lane.TP, Kind.ALL_REDUCE, "ar", OpClass.ALL_REDUCE, bytes=1e8, dim=TP)
    cost = layout_ops((gemm, ew, tp), (3.0, 1.0, 2.0))
    g = gemm_slowdown(device, GemmShape(8192, 4096, 4096), "bf16", 16, 300.0)
    h = hbm_slowdown(device, 300.0)
    assert task_slowdown(device, cost, "bf16", 16, 300.0) == pytest.approx((3 * g + 1 * h + 2) / 6)
    assert task_slowdown(device, cost, "bf16", 0, 0.0) == 1.0


@pytest.mark.parametrize("settings", [
    {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 1, "pp": 1, "zero": 3, "global_batch": 16},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "zero": 1, "global_batch": 32},
])
def test_interference_never_speeds_a_step_up(settings: dict) -> None:
    job = resolve_job(settings)
    on, off = simulate(job), simulate(dataclasses.replace(job, interference=False))
    assert on.metrics.step_time_s >= off.metrics.step_time_s
    assert on.metrics.step_time_s <= 1.5 * off.metrics.step_time_s


def test_nothing_to_overlap_changes_nothing() -> None:
    job = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 8, "pp": 1, "global_batch": 4})
    on, off = simulate(job), simulate(dataclasses.replace(job, interference=False))
    assert on.metrics.step_time_s == off.metrics.step_time_s  # TP only: no kernel beside compute
