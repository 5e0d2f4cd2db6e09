"""GPU (NCCL) traces -> Timeline: lanes, kinds, labels, bytes, groups, steps, clock alignment."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest
from test_kineto_builders import BWD_TID, TraceBuilder, nccl_args

from profiler.kineto import load_run

AR = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SR = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_tn"


def _rank_trace(rank: int, **kw: object) -> TraceBuilder:
    """Two profiler steps; step 1 has fwd/bwd/optimizer kernels, an all-reduce and a p2p send."""
    b = TraceBuilder(rank, **kw)  # type: ignore[arg-type]
    b.step(1, 0, 1000)
    b.ann("trainsim:step 0", 5, 990)
    b.ann("trainsim:F s=1 c=0 mb=2", 10, 200)
    b.ann("trainsim:layer 3", 20, 100)
    b.launched_kernel(GEMM, 30, 40, 50)                          # fwd, layer 3
    b.launched_kernel("Memcpy HtoD (Pinned -> Device)", 150, 160, 10, cat="gpu_memcpy", bytes=4096)
    b.ann("trainsim:B s=1 c=0 mb=2", 300, 200)
    b.op("autograd::engine::evaluate_function: MmBackward0", 310, 50, tid=BWD_TID)
    b.launched_kernel(GEMM, 320, 330, 60, tid=BWD_TID)            # bwd via the autograd thread
    # all_reduce on pg "1" (tp), metadata on the kernel and on record_param_comms (new format)
    b.op("c10d::allreduce_", 400, 30)
    b.op("record_param_comms", 402, 25, **nccl_args("allreduce", 1000, "BFloat16", "1", "[0, 1]"))
    b.launched_kernel(AR, 405, 410, 300, stream=40, **nccl_args("allreduce", 1000, "BFloat16", "1", "[0, 1]"))
    # GPU copy of the nccl:all_reduce range: not a kernel, must not count
    b.kernel("nccl:all_reduce", 400, 320, -1, stream=40, cat="gpu_user_annotation")
    b.x("cuda_sync", "Stream Sync", 700, 50, 0, 7, {"device": 0, "stream": 7})
    # p2p send: SendRecv kernel, kind from the CPU-side call
    b.op("c10d::send", 600, 20)
    b.ann("nccl:send", 602, 15, **{"Input Dims": [[256]], "Input type": ["float"]})
    b.launched_kernel(SR, 605, 610, 30, stream=41)
    b.ann("trainsim:optimizer", 800, 100)
    b.ann("Optimizer.step#AdamW.step", 805, 90)
    b.launched_kernel("multi_tensor_apply_kernel", 810, 1200, 30)  # runs after the step's CPU end
    b.step(2, 1000, 1000)
    b.launched_kernel(GEMM, 1010, 1300, 50)
    return b


def _write_run(tmp_path: Path, manifest: dict | None = None, **kw: object) -> Path:
    for r in (0, 1):
        _rank_trace(r, **kw).write(tmp_path / f"rank{r}.json.gz", gz=True)
    if manifest is not None:
        (tmp_path / "manifest.json").write_bytes(orjson.dumps(manifest))
    return tmp_path


def _rank0(run) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    df = pd.concat([run.timeline.spans, run.raw], axis=1)
    return df[df["rank"] == 0].reset_index(drop=True)


def test_lanes_kinds_and_labels(tmp_path: Path) -> None:
    run = load_run(_write_run(tmp_path))
    df = _rank0(run)
    by_name = {n: g for n, g in df.groupby("name")}
    gemm = by_name[GEMM].sort_values("start_s")
    assert list(gemm["kind"]) == ["fwd", "bwd"]
    assert list(gemm["lane"]) == ["compute", "compute"]
    fwd = gemm.iloc[0]
    assert (fwd["stage"], fwd["chunk"], fwd["microbatch"], fwd["layer"]) == (1, 0, 2, 3)
    bwd = gemm.iloc[1]
    assert (bwd["stage"], bwd["microbatch"], bwd["layer"]) == (1, 2, -1)
    assert by_name["multi_tensor_apply_kernel"]["kind"].item() == "optimizer"
    mem = by_name["Memcpy HtoD (Pinned -> Device)"]
    assert (mem["lane"].item(), mem["bytes"].item()) == ("memcpy", 4096)
    ar = by_name[AR].iloc[0]
    assert (ar["lane"], ar["kind"], ar["bytes"], ar["pg"], ar["pg_ranks"]) == ("comm", "all_reduce", 2000, "1", "[0, 1]")
    sr = by_name[SR].iloc[0]
    assert (sr["lane"], sr["kind"], sr["bytes"]) == ("comm", "send", 1024)
    assert set(df["name"]).isdisjoint({"nccl:all_reduce", "Stream Sync", "c10d::allreduce_"})
    assert run.timeline.meta.skipped_events == {"Trace": 2, "cuda_sync": 2, "gpu_user_annotation": 2}


def test_steps_follow_the_launch_and_last_step_is_dropped(tmp_path: Path) -> None:
    run = load_run(_write_run(tmp_path))
    df = _rank0(run)
    assert run.timeline.meta.profiler_steps_kept == (1,)
    assert run.timeline.meta.profiler_steps_dropped == (2,)
    assert run.timeline.meta.steps_kept == (0,)  # the trainsim:step label inside ProfilerStep#1
    assert set(df["step"]) == {0} and set(df["profiler_step"]) == {1}
    opt = df[df["name"] == "multi_tensor_apply_kernel"]
    assert len(opt) == 1  # launched in step 1, ran after its CPU range ended
    kept = len(df)
    everything = _rank0(load_run(tmp_path, all_steps=True))
    assert len(everything) == kept + 1 and set(everything["profiler_step"]) == {1, 2}


def test_manifest_maps_groups_to_lanes(tmp_path: Path) -> None:
    run = load_run(_write_run(tmp_path, {"process_groups": [{"name": "1", "dim": "tp", "ranks": [0, 1]}]}))
    df = _rank0(run)
    assert df.loc[df["name"] == AR, "lane"].item() == "comm.tp"
    assert df.loc[df["name"] == SR, "lane"].item() == "comm"  # no group known for it
    mesh = load_run(_write_run(tmp_path, {"mesh": {"shape": [1, 2], "dim_names": ["dp", "tp"]}}))
    assert _rank0(mesh).loc[lambda d: d["name"] == AR, "lane"].item() == "comm.tp"
    # the trainer's manifest: per mesh dim its groups (pg_name as Kineto names them), plus world
    trainer = {"process_groups": {"pp": [{"pg_name": "3", "pg_desc": "mesh_pp", "ranks": [0]}],
                                  "dp": [{"pg_name": "1", "pg_desc": "mesh_dp", "ranks": [0, 1]}],
                                  "world": [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}]}}
    assert _rank0(load_run(_write_run(tmp_path, trainer))).loc[lambda d: d["name"] == AR, "lane"].item() == "comm.dp"
    (tmp_path / "manifest.json").write_bytes(b'{"process_groups": [{"name": "1"}]}')
    with pytest.raises(ValueError, match="manifest.json: manifest process_groups entry needs a 'dim'"):
        load_run(tmp_path)


def test_collective_sequence_numbers_and_group_keys(tmp_path: Path) -> None:
    run = load_run(_write_run(tmp_path))
    df = pd.concat([run.timeline.spans, run.raw], axis=1)
    coll = df[df["source"] == "nccl_kernel"]
    assert sorted(coll.loc[coll["rank"] == 1, "group"]) == ["#0", "1#0"]  # p2p has no pg: own sequence
    assert (coll.groupby("group")["rank"].nunique() == 2).all()


def test_ranks_are_aligned_on_the_absolute_clock(tmp_path: Path) -> None:
    # rank 1's file has a base one second later and ts one second smaller: same absolute times
    _rank_trace(0).write(tmp_path / "a.json")
    b1 = _rank_trace(1, base_ns=1_700_000_001_000_000_000, origin_us=4.0e12 - 1e6)
    b1.write(tmp_path / "b.json")
    run = load_run(tmp_path)
    spans = run.timeline.spans
    s0 = spans[spans["rank"] == 0]["start_s"].to_numpy()
    s1 = spans[spans["rank"] == 1]["start_s"].to_numpy()
    assert s0 == pytest.approx(s1, abs=1e-9)
    assert list(run.steps["start_s"]) == pytest.approx([0.0, 1000e-6] * 2)  # t=0: ProfilerStep#1
    assert s0.min() == pytest.approx(40e-6)  # the first kernel
    assert run.timeline.meta.t0_unix_us == pytest.approx(1_700_000_000e6 + 4.0e12)


def test_old_format_int_timestamps_and_annotation_sizes(tmp_path: Path) -> None:
    for r in (0, 1):
        b = TraceBuilder(r, new_format=False)
        b.step(10, 0, 500)
        b.op("c10d::alltoall_base_", 10, 40, **{"Input Dims": [[6144], [6144]], "Input type": ["float", "float"]})
        b.op("record_param_comms", 12, 35)
        b.ann("nccl:all_to_all", 14, 30, **{"Input Dims": [[6144]], "Input type": ["float"]})
        b.launched_kernel(SR, 20, 30, 100, stream=84)
        b.write(tmp_path / f"worker{r}_step_12.1694128201545.pt.trace.json", pretty=True)
    run = load_run(tmp_path)
    df = run.timeline.spans
    assert list(df["kind"]) == ["all_to_all", "all_to_all"]
    assert list(df["bytes"]) == [6144 * 4, 6144 * 4]
    assert list(df["end_s"] - df["start_s"]) == pytest.approx([100e-6, 100e-6])
    assert run.timeline.meta.steps_kept == (10,)


def test_cuda_driver_launch_and_kernel_on_the_nccl_stream(tmp_path: Path) -> None:
    b = TraceBuilder(0, world_size=1)
    b.step(1, 0, 100)
    corr = b.launch(10, name="cuLaunchKernelEx", cat="cuda_driver")
    b.ann("trainsim:F s=0 c=0 mb=0", 5, 50)
    b.kernel("triton_poi_fused_add_0", 20, 5, corr, stream=7)
    b.write(tmp_path / "t.json")
    df = load_run(tmp_path / "t.json").timeline.spans
    assert (df["kind"].item(), df["microbatch"].item()) == ("fwd", 0)
