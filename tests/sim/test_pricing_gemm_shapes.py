"""Proposed wiring of topo.gemm_shape into TaskCoster (``gemm_shapes=True``): a matmul op with a
shape is priced by tile/wave quantisation; off by default, and off where a GEMM curve is
calibrated or the device has no SM count."""

from __future__ import annotations

import pytest

from core.taskgraph import matmul
from core.vocab import Kind, Lane
from sim.pricing import TaskCoster
from topo import get_cluster
from topo.collectives import CollectiveModel
from topo.placement import Placement


def _coster(cluster: str, on: bool) -> TaskCoster:
    spec = get_cluster(cluster, nodes=1)
    return TaskCoster(CollectiveModel(spec), Placement(sizes={"dp": 8}), dtype="bf16",
                      gpus_per_node=8, gemm_shapes=on)


def test_small_matmul_slower_with_shapes_large_unchanged() -> None:
    small = matmul(Lane.COMPUTE, Kind.FWD, "small", 1024, 1024, 1024)
    large = matmul(Lane.COMPUTE, Kind.FWD, "large", 16384, 16384, 16384)
    off, on = _coster("dgx-a100", False), _coster("dgx-a100", True)
    # Azure cuBLASLt FP16 1024^3 on A100: 119.4 TFLOPS measured (hardware-facts.md 2.1 sweep) on
    # one GPU, so without the 8-GPU job's slowest-GPU pace
    assert small.flops / (on.op_duration(small, 0) / on.compute_pace) / 1e12 == pytest.approx(119.4, rel=0.10)
    assert on.op_duration(small, 0) > 1.3 * off.op_duration(small, 0)
    assert on.op_duration(large, 0) == pytest.approx(off.op_duration(large, 0), rel=1e-3)


def test_on_by_default_for_gpus_and_off_on_cpu() -> None:
    spec = get_cluster("dgx-a100", nodes=1)
    default = TaskCoster(CollectiveModel(spec), Placement(sizes={"dp": 8}), dtype="bf16", gpus_per_node=8)
    assert default.gemm_shapes
    assert not TaskCoster(CollectiveModel(spec), Placement(sizes={"dp": 8}), dtype="bf16", gpus_per_node=8,
                          gemm_shapes=False).gemm_shapes
    cpu = get_cluster("cpu-host", nodes=1)  # device sm_count 0: the size-free roofline stays
    assert not TaskCoster(CollectiveModel(cpu), Placement(sizes={"dp": cpu.num_gpus}), dtype="fp32",
                          gpus_per_node=cpu.gpus_per_node, gemm_shapes=True).gemm_shapes
