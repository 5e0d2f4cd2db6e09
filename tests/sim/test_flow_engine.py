"""--fidelity flow end to end: agreement with the analytic model alone, contention between a DP
all-reduce and a pipeline send on one NIC, oversubscription, and the CLI/summary plumbing."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.groups import DP, PP
from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from sim.cli.main import main
from sim.engine import Engine
from sim.flow.transport import flow_factory
from sim.job import Job
from sim.pricing import TaskCoster, cost_graph
from sim.simulate import simulate
from topo import get_cluster
from topo.collective_fit import CollectiveFit, CollectiveFits
from topo.collectives import CollectiveModel
from topo.placement import Placement

GB = 1e9


def _coster(nodes: int, dp: int, pp: int, fits: CollectiveFits | None = None) -> TaskCoster:
    cluster = get_cluster("dgx-h100", nodes=nodes)
    placement = Placement(sizes={"tp": 8, "cp": 1, "dp": dp, "pp": pp}, order=("tp", "cp", "dp", "pp"))
    return TaskCoster(CollectiveModel(cluster), placement, dtype="bf16", gpus_per_node=8, fits=fits)


def _all_reduce(rank: int, size: float) -> Task:
    op = Op(Lane.DP, Kind.ALL_REDUCE, "grads", OpClass.ALL_REDUCE, bytes=size, dim=DP)
    return Task(rank=rank, lane=Lane.DP, kind=Kind.ALL_REDUCE, name="grads", ops=(op,))


def _send(rank: int, peer: int, size: float) -> Task:
    op = Op(Lane.PP, Kind.SEND, "act", OpClass.P2P, bytes=size, dim=PP)
    return Task(rank=rank, lane=Lane.PP, kind=Kind.SEND, name="act", ops=(op,), peer=peer, ordered=False)


def _run(tasks: list[Task], coster: TaskCoster, fidelity: str) -> list[float]:
    graph = TaskGraph.of(tasks, [()] * len(tasks))
    engine = Engine(graph, cost_graph(graph, coster), gpus_per_node=8,
                    flows=flow_factory(fidelity, coster, folded=False))
    result = engine.run()
    return list(result.end_s - result.start_s)


@pytest.mark.parametrize("size", [1e6, 64e6, 1 * GB])
def test_uncontended_collective_agrees_with_the_analytic_model(size: float) -> None:
    """Alone, a DP all-reduce across 4 nodes takes the analytic time in flow mode (to 1e-6)."""
    coster = _coster(nodes=4, dp=4, pp=1)
    analytic = _run([_all_reduce(0, size)], coster, "analytic")[0]
    flow = _run([_all_reduce(0, size)], coster, "flow")[0]
    assert analytic > 0
    assert flow == pytest.approx(analytic, rel=1e-6)


@pytest.mark.parametrize("size", [1e6, 64e6, 1 * GB])
def test_uncontended_ops_take_the_profiles_fits_in_flow_mode(size: float) -> None:
    """With measured fits for the NIC's links (slower than the NCCL model, as a calibrated
    profile may be), a DP all-reduce and a pipeline send alone take the fitted alpha-beta time
    in flow mode too, as in analytic mode, not the NCCL model's."""
    nic = get_cluster("dgx-h100", nodes=4).nic
    assert nic is not None
    all_reduce = CollectiveFit(op="all_reduce", link=nic.kind, alpha_s=80e-6, busbw_GBps=20.0)
    p2p = CollectiveFit(op="p2p", link=nic.kind, alpha_s=30e-6, busbw_GBps=15.0)
    fitted = _coster(nodes=4, dp=2, pp=2, fits=CollectiveFits([all_reduce, p2p]))
    plain = _coster(nodes=4, dp=2, pp=2)
    for task, fit, n in ((_all_reduce(0, size), all_reduce, 2), (_send(0, 16, size), p2p, 2)):
        expected = fit.time_s(size, n)
        analytic = _run([task], fitted, "analytic")[0]
        flow = _run([task], fitted, "flow")[0]
        assert analytic == pytest.approx(expected, rel=1e-9)
        assert flow == pytest.approx(expected, rel=1e-6)
        assert _run([task], plain, "flow")[0] != pytest.approx(expected, rel=0.05)


def test_dp_all_reduce_and_pp_send_on_one_nic_slow_each_other() -> None:
    """Rank 0's DP all-reduce (ring over 2 nodes) and its pipeline send to the next stage's node
    leave through the same NIC rail: in flow mode both take longer than alone; the analytic
    engine's per-node channel sharing also slows them, but only flow mode derives it from links."""
    coster = _coster(nodes=4, dp=2, pp=2)
    send_peer = coster.placement.rank_of(tp=0, cp=0, dp=0, pp=1)
    assert send_peer // 8 != 0
    ar, send = _all_reduce(0, 1 * GB), _send(0, send_peer, 1 * GB)
    ar_alone = _run([ar], coster, "flow")[0]
    send_alone = _run([send], coster, "flow")[0]
    ar_both, send_both = _run([ar, send], coster, "flow")
    assert ar_both > ar_alone * 1.05
    assert send_both > send_alone * 1.05


def _job(oversubscription: float) -> Job:
    cluster = dataclasses.replace(get_cluster("hgx-h100-roce", nodes=4), nodes_per_leaf=1,
                                  oversubscription=oversubscription)
    plan = ParallelPlan(tp=8, pp=2, dp=2, microbatch_size=1, global_batch=8, schedule="1f1b")
    model = dataclasses.replace(get_model("llama3-8b"), num_layers=4)
    return Job(model=model, plan=plan, cluster=cluster, fidelity="flow")


@settings(max_examples=6, deadline=None)
@given(st.floats(1.0, 8.0), st.floats(1.0, 8.0))
@pytest.mark.slow
def test_more_oversubscription_never_speeds_a_step_up(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert simulate(_job(high)).metrics.step_time_s >= simulate(_job(low)).metrics.step_time_s * (1 - 1e-9)


def test_heavy_oversubscription_shows_up_in_the_step() -> None:
    assert simulate(_job(16.0)).metrics.step_time_s > simulate(_job(1.0)).metrics.step_time_s


def _dp_all_reduce_s(job: Job) -> float:
    spans = simulate(job).timeline.spans
    dp = spans[(spans["lane"].astype(str) == "comm.dp") & (spans["kind"].astype(str) == "all_reduce")]
    return float((dp["end_s"] - dp["start_s"]).sum())


def test_a_profiles_fits_reach_flow_mode_end_to_end() -> None:
    """simulate() with a profile's (slow) fit for the NIC's all-reduce: the DP all-reduces take
    the fitted time in flow mode as in analytic mode, far above the NCCL model's."""
    base = _job(1.0)
    assert base.cluster.nic is not None
    slow = CollectiveFit(op="all_reduce", link=base.cluster.nic.kind, alpha_s=1e-3, busbw_GBps=2.0)
    fitted = dataclasses.replace(base, collective_fits=(slow,))
    flow_fit = _dp_all_reduce_s(fitted)
    assert flow_fit == pytest.approx(_dp_all_reduce_s(dataclasses.replace(fitted, fidelity="analytic")), rel=0.05)
    assert flow_fit > 3 * _dp_all_reduce_s(base)


def test_offload_copies_run_as_flows_end_to_end() -> None:
    """ZeRO-Infinity on NVMe in flow mode: the copies run on the flow network, every rank of a
    stage copying at once, so the step is what the analytic even split gives (within 2%)."""
    plan = ParallelPlan(tp=8, pp=2, dp=1, microbatch_size=1, global_batch=4, schedule="1f1b", zero=1,
                        offload="optimizer", offload_device="nvme")
    job = Job(model=dataclasses.replace(get_model("llama3-8b"), num_layers=4), plan=plan,
              cluster=get_cluster("dgx-h100", nodes=2), fidelity="flow")
    flow = simulate(job).metrics.step_time_s
    analytic = simulate(dataclasses.replace(job, fidelity="analytic")).metrics.step_time_s
    assert flow == pytest.approx(analytic, rel=0.02)


SMALL = ["--model", "small", "--cluster", "dgx-h100", "--nodes", "2", "--tp", "4", "--pp", "2",
         "--global-batch", "8", "--no-report", "--json"]


def test_cli_fidelity_flow_json_and_bad_value(capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", *SMALL, "--fidelity", "flow"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["fidelity"] == "flow"
    assert obj["simulation"]["approximations"][0].startswith("flow network")
    assert main(["simulate", *SMALL]) == 0
    assert json.loads(capsys.readouterr().out)["fidelity"] == "analytic"
    assert main(["simulate", *SMALL, "--fidelity", "packet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "fidelity" in err and "packet" in err and "\n" not in err


def test_job_file_fidelity_and_report_note(capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.toml").write_text('[sim]\nfidelity = "flow"\n')
    args = [a for a in SMALL if a not in ("--no-report", "--json")]
    assert main(["simulate", "--config", "job.toml", *args, "--report", "r.html"]) == 0
    assert "Network model: flow" in (tmp_path / "r.html").read_text()
    assert main(["simulate", *args, "--report", "a.html"]) == 0
    assert "contention between concurrent transfers is not modeled" in (tmp_path / "a.html").read_text()
