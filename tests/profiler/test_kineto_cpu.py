"""CPU (gloo) traces -> Timeline: top-level ops as compute, gloo calls and transfers as comm."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from test_kineto_builders import CPU_PID, TraceBuilder

from profiler.hta_metrics import per_rank_breakdown
from profiler.kineto import load_run

WORKER = 9001
F1 = "trainsim:F s=0 c=0 mb=1"


def gloo_rank(rank: int) -> TraceBuilder:
    """A gloo rank shaped like torch 2.13 output (times µs); see test_hta_metrics for the sums."""
    b = TraceBuilder(rank, backend="gloo")
    b.events.append({"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": WORKER, "ts": b.origin,
                     "args": {"name": f"thread {WORKER} (pt_gloo_runloop)"}})
    b.step(1, 0, 1000)
    b.ann(F1, 10, 200)
    b.op("aten::linear", 20, 80)
    b.op("aten::addmm", 30, 60)                                   # child: not counted again
    b.op("aten::relu", 110, 40)
    b.op("_c10d_functional::_wrap_tensor_autograd", 115, 5)      # nested helper, not comm
    b.ann("trainsim:B s=0 c=0 mb=1", 300, 400)
    b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 310, 190)
    b.op("c10d::allreduce_", 350, 30, **{"Input Dims": [[[1000]], [], []], "Input type": ["TensorList", "", ""]})
    b.ann("gloo:all_reduce", 360, 340, tid=WORKER, **{"Input Dims": [[1000]], "Input type": ["float"]})
    b.op("c10d::_reduce_scatter_base_", 650, 20, **{"Input Dims": [[500], [1000]], "Input type": ["float", "float"]})
    b.ann("gloo:all_reduce", 680, 120, tid=WORKER, **{"Input Dims": [[1000]], "Input type": ["float"]})
    peer = "send" if rank == 0 else "recv"
    b.op(f"c10d::{peer}" + ("" if peer == "send" else "_"), 820, 10, **{"Input Dims": [[[256]]], "Input type": ["TensorList"]})
    b.ann(f"gloo:{peer}", 825, 35, **{"Input Dims": [[256]], "Input type": ["float"]})
    b.ann("trainsim:optimizer", 900, 90)
    b.op("aten::add_", 910, 40)
    b.step(2, 1000, 1000)
    b.op("aten::mul", 1010, 40)
    b.step(3, 2000, 1000)
    b.op("aten::mul", 2010, 40)
    return b


def _run(tmp_path: Path):  # type: ignore[no-untyped-def]
    for r in (0, 1):
        gloo_rank(r).write(tmp_path / f"rank{r}.json.gz", gz=True)
    return load_run(tmp_path)


def test_compute_spans_are_top_level_ops_minus_collective_time(tmp_path: Path) -> None:
    run = _run(tmp_path)
    df = pd.concat([run.timeline.spans, run.raw], axis=1)
    comp = df[(df["rank"] == 0) & (df["lane"] == "compute")]
    got = [(n, round(s * 1e6), round(e * 1e6), k) for n, s, e, k in
           zip(comp["name"], comp["start_s"], comp["end_s"], comp["kind"], strict=True)]
    grad = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    assert got == [("aten::linear", 20, 100, "fwd"), ("aten::relu", 110, 150, "fwd"),
                   (grad, 310, 350, "bwd"), (grad, 380, 500, "bwd"),
                   ("aten::add_", 910, 950, "optimizer"), ("aten::mul", 1010, 1050, "other")]
    assert set(comp.loc[comp["kind"] == "fwd", "microbatch"]) == {1}


def test_gloo_transfers_take_the_kind_and_labels_of_their_call(tmp_path: Path) -> None:
    run = _run(tmp_path)
    df = pd.concat([run.timeline.spans, run.raw], axis=1)
    comm = df[(df["rank"] == 1) & (df["lane"] == "comm")]
    work = comm[comm["source"] == "gloo_work"]
    got = [(n, k, b, round(s * 1e6)) for n, k, b, s in
           zip(work["name"], work["kind"], work["bytes"], work["start_s"], strict=True)]
    assert got == [("gloo:all_reduce", "all_reduce", 4000, 360),
                   ("gloo:all_reduce", "reduce_scatter", 4000, 680), ("gloo:recv", "recv", 1024, 825)]
    calls = comm[comm["source"] == "gloo_call"]
    assert list(calls["kind"]) == ["all_reduce", "reduce_scatter", "recv"]
    assert list(calls["bytes"]) == [0, 0, 0]
    assert list(work["group"]) == list(calls["group"]) == ["#0", "#1", "#2"]
    # labels come from the call's ranges (the transfers run on a worker thread, after trainsim:B)
    assert list(work["microbatch"]) == [1, 1, -1] and list(work["stage"]) == [0, 0, -1]
    assert any("reduce_scatter call(s) ran as gloo all_reduce" in w for w in run.warnings)
    assert run.timeline.meta.backend == "gloo" and run.timeline.meta.device_kind == "cpu"


def test_gloo_without_shapes_warns_about_bytes(tmp_path: Path) -> None:
    b = gloo_rank(0)
    b.world_size = 1
    for ev in b.events:
        ev["args"].pop("Input Dims", None)
    b.write(tmp_path / "rank0.json")
    run = load_run(tmp_path)
    assert "rank 0: 3 of 3 collectives have no message size in the trace (bytes=0); gloo traces need record_shapes=True" in run.warnings
    kinds = run.timeline.spans.loc[run.timeline.spans["name"].str.startswith("gloo:"), "kind"]
    assert list(kinds) == ["all_reduce", "reduce_scatter", "send"]  # matching works without sizes


def test_async_send_on_the_main_thread_does_not_hide_compute(tmp_path: Path) -> None:
    # isend as torch.distributed.pipelining issues it: the call returns, gloo:send stays open on
    # the main thread while the next forward computes (seen in the trainer's gloo traces)
    b = TraceBuilder(0, world_size=1, backend="gloo")
    b.step(1, 0, 200)
    b.op("c10d::send", 0, 5, **{"Input Dims": [[[256]]], "Input type": ["TensorList"]})
    b.ann("gloo:send", 5, 95, **{"Input Dims": [[256]], "Input type": ["float"]})
    b.ann("trainsim:F s=0 c=0 mb=1", 8, 50)
    b.op("aten::mm", 10, 40)
    b.write(tmp_path / "rank0.json")
    run = load_run(tmp_path)
    spans = run.timeline.spans
    mm = spans[spans["name"] == "aten::mm"]
    assert (round(mm["start_s"].item() * 1e6), round(mm["end_s"].item() * 1e6)) == (10, 50)
    assert mm["microbatch"].item() == 1
    row = per_rank_breakdown(run).iloc[0]
    assert row["comm_s"] == pytest.approx(100e-6)  # call [0,5) + transfer [5,100)
    assert row["comm_overlap_fraction"] == pytest.approx(40 / 100)


def test_cpu_steps_drop_the_last(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run.timeline.meta.profiler_steps_kept == (1, 2)
    assert run.timeline.spans["end_s"].max() == pytest.approx(1050e-6)


TRAINER = textwrap.dedent('''
    import os, sys, torch, torch.distributed as dist
    from torch.profiler import profile, ProfilerActivity, record_function, schedule
    rank, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=2)
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    def dump(p):
        p.export_chrome_trace(f"{out}/rank{rank}.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=dump, record_shapes=True) as prof:
        for step in range(4):
            with record_function(f"trainsim:step {step}"):
                with record_function("trainsim:F s=0 c=0 mb=0"), record_function("trainsim:layer 0"):
                    y = lin(torch.randn(32, 64)).relu().sum()
                with record_function("trainsim:B s=0 c=0 mb=0"):
                    y.backward()
                dist.all_reduce(torch.ones(1000))
                dist.all_gather([torch.zeros(1000) for _ in range(2)], torch.ones(1000))
                dist.reduce_scatter_tensor(torch.zeros(1000), torch.ones(2000))
                t = torch.ones(256)
                dist.send(t, 1) if rank == 0 else dist.recv(t, 0)
                with record_function("trainsim:optimizer"):
                    with torch.no_grad():
                        lin.weight -= 0.1 * lin.weight.grad
            prof.step()
    dist.destroy_process_group()
''')


@pytest.mark.slow
@pytest.mark.torch
def test_real_gloo_trace_from_torch_profiler(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out.decode()[-2000:]
    (tmp_path / "store").unlink(missing_ok=True)
    (tmp_path / "trainer.py").unlink()
    run = load_run(tmp_path)
    meta = run.timeline.meta
    assert (meta.world_size, meta.backend, meta.device_kind) == (2, "gloo", "cpu")
    assert meta.profiler_steps_dropped == (3,) and meta.steps_kept == (1, 2)
    df = pd.concat([run.timeline.spans, run.raw], axis=1)
    for rank in (0, 1):
        for step in (1, 2):
            work = df[(df["rank"] == rank) & (df["step"] == step) & (df["source"] == "gloo_work")]
            got = sorted(zip(work["kind"], work["bytes"], strict=True))
            p2p = ("send" if rank == 0 else "recv", 1024.0)
            assert got == sorted([("all_reduce", 4000.0), ("all_gather", 4000.0),
                                  ("reduce_scatter", 8000.0), p2p])
            comp = df[(df["rank"] == rank) & (df["step"] == step) & (df["lane"] == "compute")]
            fwd = comp[comp["kind"] == "fwd"]
            assert len(fwd) > 0 and set(fwd["layer"]) == {0} and set(fwd["microbatch"]) == {0}
            assert (comp["kind"] == "bwd").any() and (comp["kind"] == "optimizer").any()
    assert any("ran as gloo all_reduce" in w for w in run.warnings)
