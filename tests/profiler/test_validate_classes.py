"""``trainsim validate --classes``: compute time per step by pass and op class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from profiler.validate.classes import class_rows, measured_classes, simulated_classes
from profiler.validate.measured import MeasuredRun
from sim.cli.main import main
from sim.timeline import TimelineBuilder

ROOT = Path(__file__).resolve().parents[2]


def _timeline(spans: list[tuple[int, int, str, str, float, float]]):  # type: ignore[no-untyped-def]
    b = TimelineBuilder()
    for rank, step, kind, name, start, end in spans:
        b.add(rank=rank, lane="compute", kind=kind, name=name, start_s=start, end_s=end, step=step)
    return b.build()


def test_measured_spans_are_classed_by_name_and_summed_per_step() -> None:
    """Two steps of one rank: per step, 1 s of matmul forward, 0.5 s of attention backward and
    0.25 + 0.25 s of other backward work; medians over the steps."""
    spans = []
    for step in (0, 1):
        t = 10.0 * step
        spans += [(0, step, "fwd", "aten::mm", t, t + 1.0),
                  (0, step, "bwd", "aten::scaled_dot_product_attention", t + 2, t + 2.5),
                  (0, step, "bwd", "aten::add", t + 3, t + 3.25),
                  (0, step, "bwd", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                   t + 4, t + 4.25)]
    tl = _timeline(spans)
    run = MeasuredRun(path=Path("."), manifest={}, timeline=tl)
    rows = {(r["pass"], r["class"]): r["measured_s"] for r in class_rows(measured_classes(run), measured_classes(run))}
    assert rows == {("fwd", "gemm"): 1.0, ("bwd", "attention"): 0.5, ("bwd", "other"): 0.5}


def test_simulated_spans_take_their_ops_class() -> None:
    graph = TaskGraph.of([Task(rank=0, lane=Lane.COMPUTE, kind=Kind.BWD, name="B", ops=(
        Op(Lane.COMPUTE, Kind.BWD, "L0.mlp.dgrad", OpClass.GEMM, flops=1.0),
        Op(Lane.COMPUTE, Kind.BWD, "L0.grad_accumulate", OpClass.ELEMENTWISE, bytes=1.0)))], [()])
    tl = _timeline([(0, 1, "bwd", "L0.mlp.dgrad", 0.0, 2.0), (0, 1, "bwd", "L0.grad_accumulate", 2.0, 2.5)])
    got = simulated_classes(tl, graph)
    assert got[("bwd", "gemm")] == 2.0 and got[("bwd", "other")] == 0.5


@pytest.mark.slow
def test_cli_prints_the_classes_of_a_committed_run(capsys: pytest.CaptureFixture[str]) -> None:
    run = ROOT / "traces" / "calib-ws1-small"
    code = main(["validate", str(run), "--profile", str(ROOT / "profiles" / "this-host.toml"), "--classes", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert {(r["pass"], r["class"]) for r in out["classes"]} == {
        (p, c) for p in ("fwd", "bwd") for c in ("gemm", "attention", "other")}
    # in sample (the profile's op-class factors were fitted on this run): GEMMs within 20%
    gemm = [r for r in out["classes"] if r["class"] == "gemm"]
    assert all(abs(r["error"]) < 0.2 for r in gemm), gemm
