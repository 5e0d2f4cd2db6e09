"""The MoE dispatcher's host synchronisation (sim/host_sync.py): where the op sits, the launch
counts it reads from the frameworks' sources, and the launch-bound interval it prices."""

import dataclasses

import pytest

from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass
from schedules.builder import build_task_graph
from schedules.model import ModelSpec
from schedules.moe import MoESpec
from schedules.moe_kernels import COUNT_BYTES, forward_launches
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.host_sync import (
    CPP_LAUNCH_HOST_S,
    PY_LAUNCH_HOST_S,
    exposed_s,
    interval_time_s,
    op_host_s,
    price_host_syncs,
)
from sim.job import resolve_job
from sim.simulate import simulate
from topo.host_overheads import MODULE_OP_HOST_S, launch_bound_time_s

TINY = dict(num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=176, vocab_size=256,
            seq_len=32, norm="rmsnorm", position_embedding="rope", bias=False, dropout=False)


def _moe(num_experts: int = 8) -> ModelSpec:
    """A 4-layer MoE model of ``num_experts`` experts, top-2, expert width 128."""
    moe = MoESpec(num_experts=num_experts, top_k=2, expert_ffn_size=128)
    return ModelSpec(name="tiny-moe", ffn_kind="swiglu", moe=moe, **TINY)  # type: ignore[arg-type]


def _names(plan, model=None, kind=None):
    model = model or _moe()
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)
    return [[op.name for op in t.ops] for t in graph.tasks if t.lane == Lane.COMPUTE and t.rank == 0
            and (kind is None or t.kind == kind)]


def test_interval_reduces_to_the_launch_bound_closed_form():
    # one host time per op: topo.host_overheads.launch_bound_time_s
    kernels = [1e-6, 1e-3, 1e-6, 2e-5, 3e-4]
    for h in (1e-6, 7e-6, 45e-6, 1e-3):
        assert interval_time_s(kernels, [h] * 5) == pytest.approx(launch_bound_time_s(kernels, h))
    # GPU-bound: the first issue plus the work; host-bound: the host plus the last kernel
    assert exposed_s([1e-3] * 4, [1e-5] * 4) == pytest.approx(1e-5)
    assert interval_time_s([1e-6] * 4, [1e-4] * 4) == pytest.approx(4e-4 + 1e-6)
    # an op issued before the wait (no host time) hides the host behind it
    assert exposed_s([5e-4, 1e-6], [0.0, 1e-4]) == 0.0
    with pytest.raises(ValueError, match="^issue_s="):
        interval_time_s([1e-6], [1e-6, 1e-6])
    with pytest.raises(ValueError, match="^kernel_s="):
        interval_time_s([-1.0], [1e-6])


def test_launch_counts_follow_the_sources():
    # fc2 bias: t + b * p per local expert (2 kernels) and the cat (Megatron-Core _apply_bias)
    assert forward_launches("L3.experts.fc2_bias", 16) == (33, 0)
    assert forward_launches("L3.experts.fc2_bias.recompute", 2) == (5, 0)
    # grouped GEMM: one GroupedLinear call, one cuBLAS GEMM per local expert from C++
    assert forward_launches("L0.experts.fc1", 16) == (1, 16)
    # fused permutation: three row-id-map passes and the permute (TE triton/permutation.py)
    assert forward_launches("L0.permute", 4) == (4, 0)
    assert forward_launches("L0.dispatch", 4) == (2, 0)  # tokens and probabilities
    assert forward_launches("L0.qkv", 4) == (2, 0)  # TE LayerNormLinear: the norm and the GEMM
    assert forward_launches("L0.attn.rope.recompute", 4) == (24, 0)  # eager RoPE: 12 per q and k
    assert forward_launches("L0.norm_res", 4) == (2, 0)  # bias-dropout-add, the MoE layer's pre-MLP norm
    assert forward_launches("L0.proj", 4) == (1, 0)  # anything else: one kernel, a floor
    assert op_host_s(Op(Lane.COMPUTE, Kind.FWD, "L0.experts.fc1", OpClass.GEMM), 16) == pytest.approx(
        MODULE_OP_HOST_S + 16 * CPP_LAUNCH_HOST_S)
    assert PY_LAUNCH_HOST_S == MODULE_OP_HOST_S and CPP_LAUNCH_HOST_S == 1e-6


def test_one_sync_per_moe_forward_after_the_permutation():
    plan = ParallelPlan(dp=4, ep=4, global_batch=4)
    for names in _names(plan, kind="fwd"):
        layer_syncs = [n for n in names if n.endswith("moe.host_sync")]
        assert len(layer_syncs) == sum(1 for n in names if n.endswith(".dispatch"))
        for sync in layer_syncs:
            i = names.index(sync)
            layer = sync.split(".")[0]
            assert names[i - 1] == f"{layer}.permute" and names[i + 1] == f"{layer}.dispatch"
            assert f"{layer}.experts.counts_ag" in names[:i]  # the counts are gathered first
    backward = [n for names in _names(plan, kind="bwd") for n in names]
    assert backward and not any("host_sync" in n for n in backward)  # the backward reuses the splits


def test_full_recompute_syncs_again_and_other_runtimes_do_not():
    full = ParallelPlan(dp=4, ep=4, global_batch=4, recompute="full")
    backward = [n for names in _names(full, kind="bwd") for n in names]
    assert sum(n.endswith("moe.host_sync.recompute") for n in backward) == 4  # one per layer
    torch = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch")
    assert not any("host_sync" in n for names in _names(torch) for n in names)
    # DeepEP's normal dispatch waits for its counts too, but has no separate counts gather
    deepep = [n for names in _names(ParallelPlan(dp=4, ep=4, global_batch=4, moe_dispatcher="deepep"),
                                    kind="fwd") for n in names]
    assert any("host_sync" in n for n in deepep) and not any("counts" in n for n in deepep)


def test_the_counts_gather_is_one_int64_per_expert_per_rank():
    plan = ParallelPlan(dp=8, ep=8, global_batch=8)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(_moe(16), plan, schedule, lambda tp, cp, dp, pp: pp)
    gathers = [op for t in graph.tasks for op in t.ops if op.name.endswith("experts.counts_ag")]
    assert gathers and all(op.bytes == COUNT_BYTES * 16 * 8 and str(op.dim) == "ep:8:1" for op in gathers)


def test_price_host_syncs_rotates_the_layer_at_the_sync():
    def op(name, layer=0, lane=Lane.COMPUTE, cls=OpClass.ACTIVATION, batch=1):
        return Op(lane, Kind.FWD, f"L{layer}.{name}", cls, layer=layer, batch=batch)
    ops = (op("qkv"), op("router"), op("permute"),
           op("moe.host_sync", lane=Lane.HOST, cls=OpClass.HOST_SYNC, batch=2),
           op("experts.fc2_bias"), op("act_res"), op("qkv", layer=1))
    durations = [3e-5, 1e-5, 2e-5, 0.0, 1e-6, 1e-6, 9.0]
    priced = price_host_syncs(ops, durations)
    assert priced[:3] == durations[:3] and priced[4:] == durations[4:]
    h = PY_LAUNCH_HOST_S
    # interval: permute (issued before the wait), fc2_bias (1 + 2 x 2 launches), act_res, then
    # the layer's qkv (2 launches), router and permute (4) standing for the next layer's
    kernels = [2e-5, 1e-6, 1e-6, 3e-5, 1e-5, 2e-5]
    issues = [0.0, 5 * h, h, 2 * h, h, 4 * h]
    assert priced[3] == pytest.approx(exposed_s(kernels, issues))
    assert priced[3] == pytest.approx(13 * h + 2e-5 - sum(kernels))  # host-bound: all but the last kernel hidden


def test_a_small_moe_step_waits_for_the_host_and_a_dense_one_does_not():
    job = resolve_job(dict(model="llama3-8b", cluster="dgx-h100", nodes=1, gpus_per_node=1, pp=1, dp=1,
                           global_batch=4))
    dense = simulate(dataclasses.replace(job, model=dataclasses.replace(_moe(), moe=None), interference=False))
    assert not dense.timeline.spans["name"].str.contains("host_sync").any()
    moe = simulate(dataclasses.replace(job, model=_moe(), interference=False))
    spans = moe.timeline.spans
    syncs = spans[spans["name"].str.contains(r"moe\.host_sync")]
    assert len(syncs) == 4 * 4  # 4 layers x 4 micro-batches, forward only
    waits = (syncs["end_s"] - syncs["start_s"]).to_numpy()
    # kernels of microseconds: each interval is host-bound, the host time of the layer's launches
    # (every op's but the wait's, read from the sources' counts) less at most the GPU's work
    layer0 = [n for n in spans[spans["lane"] != "host"]["name"].unique() if n.startswith("L0.")]
    launches = [forward_launches(n, 8) for n in layer0 if not n.endswith((".dgrad", ".wgrad", ".bwd"))]
    host = sum(py for py, _ in launches) * PY_LAUNCH_HOST_S + sum(c for _, c in launches) * CPP_LAUNCH_HOST_S
    assert sum(py for py, _ in launches) >= 20
    gpu = float((spans["end_s"] - spans["start_s"])[spans["name"].isin(layer0) & (spans["kind"] == "fwd")
                                                      & (spans["lane"] == "compute")].sum()) / 4
    assert ((waits <= host) & (waits >= host - 2 * gpu)).all()
