"""Expert parallelism in the simulator: EP/EDP/ETP groups in Megatron-Core's rank order, the
pricer's groups, MoE step time and memory."""

import pytest

from core.groups import DP, Axis, CommGroup
from sim.placement import expert_groups
from topo.placement import Placement


def _groups(placement, dim, ep, etp):
    return expert_groups(placement, dim, ep, etp)[1]


def test_ep_groups_follow_megatron_core_rank_order():
    # Megatron-Core RankGenerator(tp=etp, ep, dp=edp, pp, order="tp-ep-dp-pp") over the
    # (tp, cp, dp) ranks of a stage, TP innermost: with etp=1 an EP group is ep consecutive ranks
    p = Placement(sizes={"tp": 2, "dp": 8, "pp": 2})
    assert _groups(p, "ep", 4, 1)[:4] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert _groups(p, "edp", 4, 1)[:2] == [(0, 4, 8, 12), (1, 5, 9, 13)]
    # etp = tp = 2: expert-TP pairs are the TP pairs, EP strides over them, EDP over EP
    assert _groups(p, "etp", 4, 2)[0] == (0, 1)
    assert _groups(p, "ep", 4, 2)[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert _groups(p, "edp", 4, 2)[0] == (0, 8)
    # a second pipeline stage holds its own groups
    assert _groups(p, "ep", 4, 2)[-1] == (25, 27, 29, 31)


def test_groups_partition_each_stage():
    p = Placement(sizes={"tp": 4, "cp": 2, "dp": 8, "pp": 2})
    for dim, size in (("ep", 8), ("edp", 4), ("etp", 2)):
        groups = _groups(p, dim, 8, 2)
        assert all(len(g) == size for g in groups)
        assert sorted(r for g in groups for r in g) == list(range(p.world_size))


def test_expert_groups_refuse_an_ep_that_does_not_divide():
    with pytest.raises(ValueError, match="^ep=3 is invalid"):
        expert_groups(Placement(sizes={"dp": 8}), "ep", 3, 1)


# ---- MoE layers against dense closed forms ----

import dataclasses  # noqa: E402
from collections import Counter  # noqa: E402

from schedules.builder import build_task_graph  # noqa: E402
from schedules.model import ModelSpec  # noqa: E402
from schedules.moe import MoESpec  # noqa: E402
from schedules.pipeline import build_schedule  # noqa: E402
from schedules.plan import ParallelPlan  # noqa: E402
from sim.job import resolve_job  # noqa: E402
from sim.memory import MemoryModel  # noqa: E402
from sim.simulate import simulate  # noqa: E402

DENSE = dict(num_layers=4, hidden_size=512, num_heads=8, num_kv_heads=4, ffn_hidden_size=1408, ffn_kind="swiglu",
             vocab_size=1024, seq_len=512, norm="rmsnorm", position_embedding="rope", bias=False, dropout=False)
ROUTING = ("router", "permute", "unpermute")


def _model(moe=None):
    return ModelSpec(name="dense" if moe is None else "moe", moe=moe, **DENSE)


def _graph(model, plan):
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)


def _routing(op):
    return any(f".{name}" in op.name for name in ROUTING)


def test_one_expert_top1_moe_is_the_dense_model_plus_routing():
    dense, moe = _model(), _model(MoESpec(num_experts=1, top_k=1, expert_ffn_size=1408))
    plan = ParallelPlan(pp=2, global_batch=4)
    gd, gm = _graph(dense, plan), _graph(moe, plan)
    gemms_d = Counter((op.m, op.n, op.k, op.flops) for t in gd.tasks for op in t.ops if op.op_class == "gemm")
    gemms_m = Counter((op.m, op.n, op.k, op.flops) for t in gm.tasks for op in t.ops
                      if op.op_class == "gemm" and not _routing(op))
    assert gemms_m == gemms_d  # the expert's grouped GEMMs (one expert) are the dense MLP's
    ew_d = sum(op.bytes for t in gd.tasks for op in t.ops if op.op_class == "activation")
    ew_m = sum(op.bytes for t in gm.tasks for op in t.ops if op.op_class == "activation" and not _routing(op))
    assert ew_m == pytest.approx(ew_d)  # the activation function moved into the expert, no bytes lost
    # one GPU, no pipeline: the step is the compute stream's sum, so the MoE step is the dense
    # step plus the routing ops (and the activation function's own kernel, now apart) and the
    # GPU's wait for the host after the dispatcher's synchronisation (sim.host_sync)
    job = resolve_job(dict(model="llama3-8b", cluster="dgx-h100", nodes=1, gpus_per_node=1, pp=1, dp=1, global_batch=4))
    td = simulate(dataclasses.replace(job, model=dense, interference=False))
    tm = simulate(dataclasses.replace(job, model=moe, interference=False))
    spans = tm.timeline.spans
    extra = spans[spans["name"].str.contains(r"\.(?:router|permute|unpermute|experts\.act|moe\.host_sync)")]
    extra_s = float((extra["end_s"] - extra["start_s"]).sum())
    assert extra_s > 0
    assert td.metrics.step_time_s < tm.metrics.step_time_s <= td.metrics.step_time_s + extra_s * (1 + 1e-9)


def test_expert_memory_is_the_zero_closed_form_over_edp():
    h, f, experts = 512, 256, 16
    model = _model(MoESpec(num_experts=experts, top_k=2, expert_ffn_size=f))
    for zero, ep in ((0, 2), (1, 2), (1, 8), (2, 4), (3, 4)):
        plan = ParallelPlan(dp=8, pp=2, ep=ep, zero=zero, global_batch=16, grad_reduce_dtype="compute")
        mm = MemoryModel(model, plan, build_schedule("1f1b", 2, 1, 1))
        states, _ = mm.state_bytes(0)
        psi = mm.rank_params(0)  # non-expert parameters of pipeline rank 0 (before ZeRO)
        n = plan.dp
        other = (2 * psi / (n if zero >= 3 else 1) + 2 * psi / (n if zero >= 2 else 1)
                 + 12 * psi / (n if zero >= 1 else 1))
        psi_e = 2 * experts / ep * 3 * h * f  # 2 MoE layers on the stage, E/ep experts of 3 h x f matrices
        edp = plan.dp // ep
        expert = (2 * psi_e / (edp if zero >= 3 else 1) + 2 * psi_e / (edp if zero >= 2 else 1)
                  + 12 * psi_e / (edp if zero >= 1 else 1))
        assert states.total == pytest.approx(other + expert), (zero, ep)


def test_expert_gradients_are_reduced_over_edp():
    model = _model(MoESpec(num_experts=16, top_k=2, expert_ffn_size=256))
    for ep, expected in ((2, 4), (8, 1)):
        plan = ParallelPlan(dp=8, ep=ep, zero=1, global_batch=8)
        graph = _graph(model, plan)
        reds = [op for t in graph.tasks for op in t.ops if op.name.startswith("expert_grad")]
        if expected == 1:
            assert not reds  # one replica of each expert: nothing to reduce
            continue
        assert reds and all(str(op.dim) == f"edp:{ep}:1" and op.op_class == "reduce_scatter" for op in reds)
        assert sum(op.bytes for op in reds) == pytest.approx(2 * 4 * 16 / ep * 3 * 512 * 256)


# ---- all-to-all overlap (schedules/passes/ep_overlap.py) ----

def _qwen_job(schedule, overlap, ep=8, nodes=2, cluster="dgx-h100"):
    extra = {"vpp": 2} if schedule == "dualpipev" else {}
    job = resolve_job(dict(model="qwen3-235b-a22b", cluster=cluster, nodes=nodes, pp=2, dp=8 * nodes // 2,
                           global_batch=16 * nodes, recompute="full", zero=1, schedule=schedule, uneven_stages=True,
                           **extra))
    return dataclasses.replace(job, plan=dataclasses.replace(job.plan, ep=ep, moe_overlap=overlap))


@pytest.mark.parametrize("schedule", ["1f1b", pytest.param("dualpipev", marks=pytest.mark.slow)])
def test_overlap_never_slower_and_moves_the_all_to_alls(schedule):
    off = simulate(_qwen_job(schedule, "off"))
    on = simulate(_qwen_job(schedule, "on"))
    assert on.metrics.step_time_s <= off.metrics.step_time_s
    assert on.metrics.step_time_s < off.metrics.step_time_s * 0.99  # it hides something
    lanes = set(on.timeline.spans["lane"])
    assert "comm.ep" in lanes
    if schedule == "dualpipev":  # auto is on under DualPipeV
        assert simulate(_qwen_job(schedule, "auto")).metrics.step_time_s == on.metrics.step_time_s
    else:
        assert simulate(_qwen_job(schedule, "auto")).metrics.step_time_s == off.metrics.step_time_s


def test_overlap_pairs_a_forward_with_another_micro_batchs_backward():
    from schedules.passes.ep_overlap import pairs
    from schedules.passes.program import ActionSlot
    from schedules.stages import plan_stages

    model = _model(MoESpec(num_experts=8, top_k=2, expert_ffn_size=256))
    plan = ParallelPlan(pp=2, global_batch=8, dp=2, ep=2, schedule="dualpipev", vpp=2)
    schedule = build_schedule("dualpipev", 2, plan.num_microbatches, 2)
    stages = plan_stages(model, plan)
    slots = tuple(ActionSlot(index=i, action=a, stage=stages[a.stage], blocks=((),))
                  for i, a in enumerate(schedule.orders[0]))
    found = pairs(slots)
    assert found
    for first, second in set(found.values()):
        a, b = slots[first].action, slots[second].action
        assert second == first + 1 and {a.phase, b.phase} == {"F", "B"}
        assert (a.microbatch, a.chunk) != (b.microbatch, b.chunk)


def test_job_files_and_flags_set_the_expert_fields(tmp_path):
    from sim.cli.job_args import add_job_arguments, job_from_args
    from sim.job import read_job_file

    path = tmp_path / "job.toml"
    path.write_text('[model]\nmodel = "qwen3-235b-a22b"\n[plan]\ntp = 1\npp = 2\ndp = 8\nep = 8\nmoe_imbalance = 1.5\n'
                    'moe_overlap = "on"\nglobal_batch = 16\nuneven_stages = true\n[cluster]\ncluster = "dgx-h100"\n')
    job = resolve_job(read_job_file(str(path)))
    assert (job.plan.ep, job.plan.moe_imbalance, job.plan.moe_overlap) == (8, 1.5, "on")
    import argparse
    parser = argparse.ArgumentParser()
    add_job_arguments(parser)
    args = parser.parse_args(["--config", str(path), "--ep", "4", "--etp", "1", "--moe-overlap", "off"])
    job = job_from_args(args)
    assert (job.plan.ep, job.plan.etp, job.plan.moe_overlap) == (4, 1, "off")


def test_the_torch_runtime_reduces_and_steps_the_experts_over_edp():
    model = _model(MoESpec(num_experts=16, top_k=2, expert_ffn_size=256))
    plan = ParallelPlan(dp=8, ep=2, zero=2, global_batch=8, framework="torch")
    graph = _graph(model, plan)
    reds = [op for t in graph.tasks for op in t.ops if op.name.startswith("expert_grad")]
    assert reds and all(str(op.dim) == "edp:2:1" for op in reds)
    assert sum(op.bytes for op in reds) == pytest.approx(2 * 4 * 16 / 2 * 3 * 512 * 256)
    assert any(op.name == "optimizer.experts" for t in graph.tasks for op in t.ops)


# ---- DeepEP dispatch (per-node deduplication) ----

def test_deepep_volume_closed_forms():
    from math import comb

    from sim.placement import deepep_volume

    assert deepep_volume(256, 8, 1) == 1.0  # a single destination: every copy goes there
    # 8 experts top-2 on 2 nodes: a node is missed with C(4,2)/C(8,2) = 6/28
    assert deepep_volume(8, 2, 2) == pytest.approx(2 * (1 - 6 / 28) / 2)
    # DeepSeek-V3 over 8 nodes: 8 (1 - C(224,8)/C(256,8)) / 8
    assert deepep_volume(256, 8, 8) == pytest.approx(1 - comb(224, 8) / comb(256, 8))
    assert deepep_volume(256, 1, 8) == pytest.approx(1.0)  # top-1: one copy, one node


@pytest.mark.parametrize(("experts", "top_k", "destinations"), [(256, 8, 8), (128, 8, 8), (32, 4, 8), (8, 2, 2)])
def test_deepep_volume_is_deepeps_layout_rule_on_average(experts: int, top_k: int, destinations: int) -> None:
    """DeepEP's get_dispatch_layout marks is_token_in_rank[t, r] when any of token t's top-k
    experts lives on rank r (experts placed contiguously, E/n per destination), and dispatch sends
    the token once per marked destination: the mean count over uniformly drawn top-k sets, over
    k, is the closed form (inside one node for ranks, across nodes for nodes alike)."""
    import numpy as np

    from sim.placement import deepep_volume

    rng = np.random.default_rng(0)
    draws = np.argsort(rng.random((20_000, experts)), axis=1)[:, :top_k]  # k distinct experts per token
    per_destination = experts // destinations
    marked = np.zeros((draws.shape[0], destinations), dtype=bool)
    np.put_along_axis(marked, draws // per_destination, True, axis=1)
    assert marked.sum(axis=1).mean() / top_k == pytest.approx(deepep_volume(experts, top_k, destinations), rel=0.02)


def test_round_robin_routing_sends_a_token_to_the_nodes_its_consecutive_experts_live_on():
    """NeMo AutoModel's FakeBalancedGate gives token i the experts (i·k + j) mod E: with E/n
    experts per node a multiple of k, one node per token, so DeepEP's network copies are 1/k of
    the per-expert copies (DeepSeek-V3 1/8, GPT-OSS 1/4 over 8 nodes); a block of k that
    straddles nodes counts each node once."""
    from sim.placement import deepep_volume, round_robin_nodes

    assert round_robin_nodes(256, 8, 8) == 1.0 and deepep_volume(256, 8, 8, "round-robin") == pytest.approx(1 / 8)
    assert deepep_volume(128, 4, 8, "round-robin") == pytest.approx(1 / 4)
    # E=6, k=4, 3 nodes of 2: starts 0, 4, 2 -> experts {0..3}, {4,5,0,1}, {2..5}: two nodes each
    assert round_robin_nodes(6, 4, 3) == 2.0 and deepep_volume(6, 4, 3, "round-robin") == pytest.approx(0.5)
    assert deepep_volume(256, 8, 1, "round-robin") == 1.0  # a single destination
    for experts, top_k in ((256, 8), (128, 4), (8, 2)):
        for nodes in (2, 4, 8):
            if experts % nodes == 0:  # consecutive experts never span more nodes than random ones
                assert deepep_volume(experts, top_k, nodes, "round-robin") <= deepep_volume(experts, top_k, nodes)


def test_round_robin_routing_lowers_deepep_traffic_only():
    def a2a_s(dispatcher, routing):
        job = resolve_job(dict(model="deepseek-v3", cluster="dgx-h100", nodes=8, tp=1, pp=1, dp=64, ep=64,
                               global_batch=64, recompute="full", zero=1))
        moe = dataclasses.replace(job.model.moe, routing=routing)
        job = dataclasses.replace(job, model=dataclasses.replace(job.model, moe=moe),
                                  plan=dataclasses.replace(job.plan, moe_dispatcher=dispatcher), interference=False)
        spans = simulate(job).timeline.spans
        ep_spans = spans[spans["lane"] == "comm.ep"]
        return float((ep_spans["end_s"] - ep_spans["start_s"]).sum())
    assert a2a_s("deepep", "round-robin") < a2a_s("deepep", "uniform")
    # Megatron's all-to-all dispatcher sends one copy per routed expert whatever the routing
    assert a2a_s("alltoall", "round-robin") == pytest.approx(a2a_s("alltoall", "uniform"))


def test_an_unknown_routing_is_refused():
    with pytest.raises(ValueError, match="^moe.routing='zipf' is invalid: expected one of uniform, round-robin$"):
        MoESpec(num_experts=8, top_k=2, expert_ffn_size=64, routing="zipf")


def test_deepep_dispatch_is_cheaper_across_nodes_and_inside_one():
    def a2a_s(cluster, ep, dispatcher):
        job = resolve_job(dict(model="deepseek-v3", cluster=cluster, nodes=8, tp=1, pp=1, dp=64, ep=ep,
                               global_batch=64, recompute="full", zero=1))
        job = dataclasses.replace(job, plan=dataclasses.replace(job.plan, moe_dispatcher=dispatcher),
                                  interference=False)
        spans = simulate(job).timeline.spans
        ep_spans = spans[(spans["lane"] == "comm.ep") & (spans["kind"] == "all_to_all")]  # not the counts' gather
        return float((ep_spans["end_s"] - ep_spans["start_s"]).sum())
    assert a2a_s("dgx-h100", 64, "deepep") < a2a_s("dgx-h100", 64, "alltoall")
    # inside one node DeepEP sends a token once per destination rank (about 5.3 of 8 here)
    from sim.placement import deepep_volume
    inside = a2a_s("dgx-h100", 8, "deepep") / a2a_s("dgx-h100", 8, "alltoall")
    assert deepep_volume(256, 8, 8) <= inside < 1.0


def test_the_pricer_resolves_expert_dims_to_megatron_groups():
    from sim.pricing import TaskCoster
    from topo import CollectiveModel, get_cluster

    placement = Placement(sizes={"tp": 2, "dp": 8, "pp": 2})
    coster = TaskCoster(CollectiveModel(get_cluster("dgx-h100", nodes=4)), placement, dtype="bf16", gpus_per_node=8)
    assert coster.group(CommGroup.expert(Axis.EP, 4, 1), 5) == (4, 5, 6, 7)
    assert coster.group(CommGroup.expert(Axis.EDP, 4, 2), 1) == (1, 9)
    assert coster.group(DP, 0) == tuple(range(0, 16, 2))  # the ordinary dimensions are unchanged


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipev"])
@pytest.mark.slow
def test_every_rank_simulated_gives_the_folded_step(schedule):
    job = _qwen_job(schedule, "auto")
    folded = simulate(job).metrics.step_time_s
    assert simulate(dataclasses.replace(job, folded=False)).metrics.step_time_s == pytest.approx(folded, rel=1e-9)
