"""The included trainer's MoE block runs outside DTensor under TP: the pricer leaves the DTensor
overheads (``tp_overhead_s``, ``tp_host_overhead_s``) off its ops (schedules/moe_torch.py),
checked against the recorded trace and against the priced graph of that recording's job."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from core.taskgraph import Op
from core.vocab import COMPUTE_CLASSES, Kind, Lane, OpClass
from profiler.validate.job import job_for_run
from profiler.validate.measured import load_measured
from schedules.moe_torch import op_role, runs_on_local_tensors
from sim.simulate import build_priced
from topo.hardware_profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "traces" / "ep2tp2dp2-moe"
PROFILE = ROOT / "profiles" / "this-host.toml"


@pytest.fixture(scope="module")
def spans():
    """The MoE sample's measured spans, parsed once for the module (the tests only read them)."""
    if not (RUN / "manifest.json").is_file():
        pytest.skip("MoE sample not recorded")
    return load_measured(RUN).timeline.spans


@pytest.fixture(scope="module")
def graph():
    """The priced task graph of the MoE sample's job (default profile), built once for the module."""
    if not (RUN / "manifest.json").is_file():
        pytest.skip("MoE sample not recorded")
    return build_priced(job_for_run(json.loads((RUN / "manifest.json").read_text()))).graph


def test_roles_strip_the_layer_and_pass() -> None:
    assert op_role("L3.experts.fc1.dgrad") == "experts.fc1"
    assert op_role("L0.router.topk.recompute") == "router.topk"
    assert op_role("L12.router.wgrad") == "router"
    assert op_role("optimizer.experts") == "optimizer.experts"
    assert runs_on_local_tensors(Op(Lane.COMPUTE, Kind.BWD, "L1.unpermute.dgrad", OpClass.ACTIVATION, bytes=8.0, layer=1))
    assert not runs_on_local_tensors(Op(Lane.COMPUTE, Kind.FWD, "L1.q", OpClass.GEMM, flops=8.0, layer=1))
    assert not runs_on_local_tensors(Op(Lane.COMPUTE, Kind.FWD, "L1.norm_res", OpClass.ACTIVATION, bytes=8.0, layer=1))


def test_trace_shows_the_experts_outside_dtensor(spans) -> None:
    """Ground truth: per step and rank the experts run 24 plain ``aten::matmul`` calls (4 layers
    x 2 local experts x 3 matmuls), each far cheaper than a DTensor ``aten::linear`` of the
    attention (the DTensor dispatch the profile's ``tp_overhead_s`` stands for)."""
    rank0 = spans[(spans["rank"] == 0) & (spans["lane"] == "compute")]
    dur = (rank0["end_s"] - rank0["start_s"]).groupby(rank0["name"].astype(str))
    steps = rank0["step"].nunique()
    matmuls, linears = dur.get_group("aten::matmul"), dur.get_group("aten::linear")
    assert len(matmuls) == 24 * steps
    assert statistics.median(matmuls) < 0.3 * statistics.median(linears)


@pytest.mark.skipif(not (RUN / "manifest.json").is_file() or not PROFILE.is_file(), reason="not recorded")
def test_moe_ops_are_priced_without_the_dtensor_overheads() -> None:
    manifest = json.loads((RUN / "manifest.json").read_text())
    job = job_for_run(manifest, profile=load_profile(PROFILE))
    device = job.cluster.device
    assert device.tp_overhead_s > 0 and device.tp_host_overhead_s > 0
    priced = build_priced(job)
    coster = priced.coster
    moe_ops = dense_ops = 0
    for task in priced.graph.tasks:
        if task.rank != 0 or task.lane != "compute":
            continue
        for op in task.ops:
            if op.op_class not in COMPUTE_CLASSES or op.op_class == "optimizer" or op.duration_s is not None:
                continue
            plain = dataclasses.replace(op, layer=-1)  # the same work, not named as an MoE op
            with_dtensor = coster.op_duration(plain, 0)
            got = coster.op_duration(op, 0)
            if runs_on_local_tensors(op):
                moe_ops += 1
                assert got == pytest.approx(with_dtensor - device.tp_overhead_s)
            else:
                dense_ops += 1
                assert got == pytest.approx(with_dtensor)
    # per layer forward router, top-k, permute, 4 input matmuls (w1, w3 of 2 local experts), 4
    # activation calls (SiLU, product), 2 output matmuls, unpermute: 14; their input gradients: 14;
    # the matmuls' and the router's weight gradients: 7
    assert moe_ops == manifest["config"]["model"]["num_layers"] * 35 * job.steps
    assert dense_ops > 0
    gaps = [op.duration_s for task in priced.graph.tasks if task.rank == 0 and task.lane == "compute"
            for op in coster._with_host_gaps(task.ops) if op.lane == "host" and op.op_class == "fixed"]
    assert min(gaps) == pytest.approx(device.host_overhead_s)
    assert max(gaps) == pytest.approx(device.host_overhead_s + device.tp_host_overhead_s)


def test_dense_and_non_torch_jobs_price_every_op_with_dtensor() -> None:
    """Only the torch runtime's MoE ops change: a dense recording's job has no local ops."""
    manifest = json.loads((ROOT / "traces" / "calib-tp2-tiny" / "manifest.json").read_text())
    job = job_for_run(manifest, profile=load_profile(PROFILE) if PROFILE.is_file() else None)
    assert build_priced(job).coster.local_op is None


def test_moe_gradients_are_summed_over_tp_as_the_trace_shows(spans, graph) -> None:
    """The trainer's MoE parameters are replicated over TP with partial gradients, all-reduced
    over TP one parameter at a time at REDUCE_GRAD (router 1024 bytes, each layer's stacked
    expert w1, w3, w2 90112 bytes, per rank and step); the trainer's EDP groups (dp / ep) have
    one rank, so there is no expert-data-parallel reduction. The graph's TP gradient all-reduces
    have the sizes of the trace's, the sequence-parallel norms' (hidden x 4 bytes) aside, which
    dense models leave unmodelled too."""
    manifest = json.loads((RUN / "manifest.json").read_text())
    hidden = manifest["config"]["model"]["hidden_size"]
    work = spans[(spans["rank"] == 0) & (spans["lane"] == "comm.tp") & (spans["kind"] == "all_reduce")
                 & (spans["name"].astype(str) == "gloo:all_reduce")]
    steps = spans.loc[spans["rank"] == 0, "step"].nunique()
    measured = sorted(int(b) for b in work["bytes"] if b != 4 * hidden)
    tasks = [t for t in graph.tasks if t.rank == 0 and t.step == 0]
    simulated = sorted(int(op.bytes) for t in tasks for op in t.ops if ".tp_grad_ar" in op.name)
    assert measured == simulated * steps
    assert not [t for t in tasks if t.name.startswith("expert_grad")]


def test_trainer_edp_of_one_rank_shards_no_expert_state() -> None:
    """TP2 x DP2 x EP2 under ZeRO-2: the trainer's experts unit is ``fully_shard`` over its EDP
    mesh of dp / ep = 1 rank, so the optimizer steps every local expert parameter (Megatron-Core's
    EDP of tp x dp / ep = 2 ranks would halve them) and nothing is reduced over EDP."""
    from schedules.builder import BuildOptions, build_task_graph
    from schedules.model_presets import get_model
    from schedules.moe import MoESpec
    from schedules.pipeline import build_schedule
    from schedules.plan import ParallelPlan
    from schedules.stage_ops import adam_bytes_per_param
    from schedules.stages import plan_stages
    from topo.placement import Placement

    model = dataclasses.replace(get_model("tiny"), moe=MoESpec(num_experts=4, top_k=2, expert_ffn_size=176))
    plan = ParallelPlan(tp=2, dp=2, ep=2, zero=2, global_batch=2, microbatch_size=1, sequence_parallel=True,
                        dtype="fp32", framework="torch", overlap_grad_reduce=False)
    assert plan.edp == 2  # Megatron-Core's
    placement = Placement(sizes={"tp": 2, "dp": 2})
    graph = build_task_graph(model, plan, build_schedule(plan.schedule, 1, plan.num_microbatches, 1),
                             placement.grid_rank_function(), BuildOptions(gloo_host=True))
    [op] = [op for t in graph.tasks if t.rank == 0 for op in t.ops if op.name == "optimizer.experts"]
    experts = sum(s.expert_params_local for s in plan_stages(model, plan)[:1])
    assert op.bytes == pytest.approx(adam_bytes_per_param(plan, host_loop=True) * experts)
    assert not [t for t in graph.tasks if t.name.startswith("expert_grad")]


def test_all_to_alls_per_layer_match_the_trace(spans, graph) -> None:
    """Per MoE layer and micro-batch the trainer issues 5 all-to-alls (counts, dispatch and
    combine forward, the two transposed exchanges backward); the counts exchange carries
    8 x experts bytes. The simulated graph has the same number, the counts op of that size."""
    manifest = json.loads((RUN / "manifest.json").read_text())
    config = manifest["config"]
    calls = spans[(spans["rank"] == 0) & (spans["name"].astype(str) == "gloo:all_to_all")]
    steps = spans.loc[spans["rank"] == 0, "step"].nunique()
    per_layer = len(calls) / (steps * config["model"]["num_layers"] * config["num_microbatches"])
    ops = [op for t in graph.tasks if t.rank == 0 and t.step == 0 for op in t.ops if op.op_class == "all_to_all"]
    assert len(ops) / (config["model"]["num_layers"] * config["num_microbatches"]) == per_layer == 5
    counts = [op.bytes for op in ops if ".counts_a2a" in op.name]
    assert counts and set(counts) == {float(calls["bytes"].min())} == {8.0 * config["model"]["moe"]["num_experts"]}


def test_expert_matmuls_are_the_trainers_calls(spans, graph) -> None:
    """The trainer runs its local experts one after the other, 3 matmuls each (x @ w1, x @ w3,
    then @ w2): the trace's expert ``aten::matmul`` per rank and step; the simulated forward has
    as many expert matmul ops, with the grouped GEMMs' FLOPs."""
    manifest = json.loads((RUN / "manifest.json").read_text())
    rank0 = spans[spans["rank"] == 0]
    measured = (rank0["name"].astype(str) == "aten::matmul").sum() / rank0["step"].nunique()
    fwd = [op for t in graph.tasks if t.rank == 0 and t.step == 0 for op in t.ops
           if op.op_class == "gemm" and op_role(op.name) in ("experts.fc1", "experts.fc2")
           and not op.name.split("#")[0].endswith((".dgrad", ".wgrad"))]
    assert len(fwd) == measured == 24
    model = manifest["config"]["model"]
    # rows the rank's local experts receive under even routing: its SP shard's token copies (T/tp x k)
    rows = model["seq_len"] / manifest["config"]["tp"] * model["moe"]["top_k"]
    per_layer = 2 * rows * model["hidden_size"] * model["moe"]["expert_ffn_size"] * 3  # w1, w3, w2
    assert sum(op.flops for op in fwd) == pytest.approx(model["num_layers"] * per_layer)
