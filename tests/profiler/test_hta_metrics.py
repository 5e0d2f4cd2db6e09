"""per_rank_breakdown on small traces whose HTA figures are computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_kineto_builders import TraceBuilder
from test_kineto_cpu import gloo_rank

from profiler.hta_metrics import BREAKDOWN_COLUMNS, per_rank_breakdown
from profiler.kineto import load_run

US = 1e-6


def _gpu_rank(rank: int) -> TraceBuilder:
    b = TraceBuilder(rank)
    b.step(1, 0, 400)
    b.launched_kernel("gemm_a", 1, 0, 100, stream=7)
    b.launched_kernel("gemm_b", 2, 50, 100, stream=24)                  # overlaps gemm_a
    b.launched_kernel("ncclDevKernel_AllReduce_RING_LL(x)", 3, 120, 100, stream=40)
    b.launched_kernel("Memset (Device)", 4, 300, 10, cat="gpu_memset")
    b.kernel("nccl:all_reduce", 0, 400, -1, stream=40, cat="gpu_user_annotation")  # ignored
    return b


def test_gpu_breakdown_closed_form(tmp_path: Path) -> None:
    # compute [0,150) = 150; comm [120,220) = 100; memset [300,310); span 310; busy 230
    for r in (0, 1):
        _gpu_rank(r).write(tmp_path / f"rank{r}.json")
    out = per_rank_breakdown(load_run(tmp_path))
    assert list(out.columns) == list(BREAKDOWN_COLUMNS)
    row = out.iloc[0]
    assert row["span_s"] == pytest.approx(310 * US)
    assert row["compute_fraction"] == pytest.approx(150 / 310)
    assert row["non_compute_fraction"] == pytest.approx(80 / 310)
    assert row["idle_fraction"] == pytest.approx(80 / 310)
    assert row["comm_s"] == pytest.approx(100 * US)
    assert row["comm_overlap_fraction"] == pytest.approx(30 / 100)
    assert row["step_time_s"] == pytest.approx(400 * US)


def test_cpu_breakdown_closed_form(tmp_path: Path) -> None:
    # gloo_rank, steps 1-2 kept. compute: [20,100) [110,150) [310,350) [380,500) [910,950)
    # [1010,1050) = 360. comm: [350,800) [820,860) = 490. overlap with compute: [380,500) = 120.
    # span 20..1050 = 1030; busy = 730.
    for r in (0, 1):
        gloo_rank(r).write(tmp_path / f"rank{r}.json")
    row = per_rank_breakdown(load_run(tmp_path)).iloc[0]
    assert row["span_s"] == pytest.approx(1030 * US)
    assert row["compute_fraction"] == pytest.approx(360 / 1030)
    assert row["non_compute_fraction"] == pytest.approx(370 / 1030)
    assert row["idle_fraction"] == pytest.approx(300 / 1030)
    assert row["comm_s"] == pytest.approx(490 * US)
    assert row["comm_overlap_fraction"] == pytest.approx(120 / 490)
    assert row["step_time_s"] == pytest.approx(1000 * US)


def test_no_steps_and_no_comm_give_nan_where_undefined(tmp_path: Path) -> None:
    b = TraceBuilder(0, world_size=1)
    b.launched_kernel("gemm", 0, 10, 5)
    b.write(tmp_path / "r.json")
    row = per_rank_breakdown(load_run(tmp_path)).iloc[0]
    assert np.isnan(row["step_time_s"]) and np.isnan(row["comm_overlap_fraction"])
    assert row["comm_s"] == 0 and row["compute_fraction"] == pytest.approx(1.0)
