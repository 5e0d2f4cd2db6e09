"""The simulator's model of the trainer's FSDP2 CPU offload (framework="torch", offload="optimizer").

Ground truth: the trainer's tiny model as torch builds it (its parameter count) and FSDP2's
CPUOffloadPolicy as torch 2.13 runs it: every all-gather is preceded by a host -> device copy of
the unit's parameter shard (1/dp of its parameters), every reduce-scatter followed by a device ->
host copy of the gradient shard, the optimizer steps on the host over the rank's 1/dp shard, and
nothing is copied back after it. With one micro-batch ZeRO-2 gathers each of the 5 units (4
blocks + root) once per step, ZeRO-3 twice (forward and backward), as in the recorded traces.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from core.taskgraph import TaskGraph
from schedules.builder import BuildOptions, build_task_graph
from schedules.model_presets import get_model
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan

FP32_BYTES = 4
UNITS = 5  # the tiny model's 4 blocks + the root unit (embedding, final norm, head)
DP = 2


def _graph(**fields: object) -> TaskGraph:
    plan = ParallelPlan(framework="torch", dtype="fp32", **fields)  # type: ignore[arg-type]
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return build_task_graph(get_model("tiny"), plan, schedule, lambda tp, cp, dp, pp: dp,
                            BuildOptions(folded=False, steps=2))


def _torch_params() -> int:
    pytest.importorskip("torch")
    from profiler.trainer.model import build_model

    return sum(p.numel() for p in build_model(get_model("tiny"), seed=0).parameters())


def _by_name(graph: TaskGraph, rank: int, step: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for task in graph.tasks:
        if task.rank == rank and task.step == step:
            out[f"{task.lane}/{task.kind}/{task.name}"].append(sum(op.bytes for op in task.ops))
    return out


@pytest.mark.parametrize(("zero", "gathers_per_unit"), [(2, 1), (3, 2)])
def test_offload_tasks_and_bytes(zero: int, gathers_per_unit: int) -> None:
    params = _torch_params()
    graph = _graph(dp=DP, zero=zero, global_batch=DP, offload="optimizer")
    for rank in range(DP):
        for step in (0, 1):
            tasks = _by_name(graph, rank, step)
            h2d, d2h = tasks["memcpy/offload/param h2d"], tasks["memcpy/offload/grad d2h"]
            assert len(h2d) == UNITS * gathers_per_unit
            assert sum(h2d) == pytest.approx(gathers_per_unit * FP32_BYTES * params / DP)
            assert len(d2h) == UNITS
            assert sum(d2h) == pytest.approx(FP32_BYTES * params / DP)
            assert tasks["host/optimizer/cpu optimizer"] == [pytest.approx(CPU_ADAM_BYTES_PER_PARAM * params / DP)]
            assert "compute/optimizer/optimizer" not in tasks  # the step is on the host, not the device


def test_copies_sit_between_their_collectives_and_the_optimizer() -> None:
    graph = _graph(dp=DP, zero=3, global_batch=DP, offload="optimizer")
    tasks, deps = graph.tasks, graph.deps  # task ids are list indices
    for tid, task in enumerate(tasks):
        if task.rank != 0 or task.step != 0:
            continue
        if task.name.endswith("param_ag"):
            copy_in = [d for d in deps[tid] if tasks[d].name.endswith("param_copy_in")]
            assert copy_in  # the gather waits for the copy into its buffer, which waits for the shard
            assert any(tasks[d].name == "param h2d" for d in deps[copy_in[0]])
        if task.name == "grad d2h":
            assert [tasks[d].kind for d in deps[tid]] == ["reduce_scatter"]
        if task.name == "cpu optimizer":
            assert sum(tasks[d].name == "grad d2h" for d in deps[tid]) == UNITS


def test_no_offload_tasks_without_offload() -> None:
    graph = _graph(dp=DP, zero=3, global_batch=DP)
    assert not any(t.kind == "offload" or t.lane in ("memcpy", "host") for t in graph.tasks)


@pytest.mark.parametrize(("fields", "word"), [
    ({"dp": 2, "zero": 1, "global_batch": 2}, "zero 2 or 3"),
    ({"dp": 2, "zero": 3, "global_batch": 2, "offload_device": "nvme"}, "offload_device=cpu"),
])
def test_torch_framework_offload_is_fsdp2_cpu_offload_only(fields: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match="offload='optimizer' is invalid") as err:
        ParallelPlan(framework="torch", offload="optimizer", **fields)  # type: ignore[arg-type]
    assert word in str(err.value)


@pytest.mark.parametrize("cluster_name", ["cpu-host", "dgx-h100"])
def test_offload_prices_follow_where_the_device_memory_is(cluster_name: str) -> None:
    """On a CPU "device" (cpu-host) torch's ``Tensor.to("cpu")`` moves nothing and the host
    optimizer runs on the same cores: copies cost 0 and the host step costs the device's step.
    On GPUs a copy crosses PCIe: at least bytes / the GPU's PCIe bandwidth.

    Both graphs are the ones ``simulate`` prices (:func:`sim.simulate.build_priced`): on cpu-host
    the ranks are gloo CPU processes, so the device's own optimizer is the trainer's single-tensor
    AdamW loop, the same one the offloaded step runs (a graph built without ``gloo_host`` would
    give the device torch's foreach AdamW with clipping, 96 B/param, against the loop's 72)."""
    from sim.host_pricing import HostOpPricer
    from sim.job import Job
    from sim.simulate import build_priced
    from topo import get_cluster

    cluster = get_cluster(cluster_name, nodes=1)
    dp = cluster.num_gpus
    plan = ParallelPlan(framework="torch", dtype="fp32", dp=dp, zero=3, global_batch=dp, offload="optimizer")
    priced = build_priced(Job(model=get_model("tiny"), plan=plan, cluster=cluster, folded=False, steps=2))
    by_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for task, cost in zip(priced.graph.tasks, priced.costs, strict=True):
        by_kind[f"{task.lane}/{task.kind}"].append((sum(op.bytes for op in task.ops), cost.duration_s))
    copies = by_kind["memcpy/offload"]
    if cluster_name == "cpu-host":
        assert copies and all(seconds == 0.0 for _, seconds in copies)
        plain = ParallelPlan(framework="torch", dtype="fp32", dp=dp, zero=3, global_batch=dp)
        plain_priced = build_priced(Job(model=get_model("tiny"), plan=plain, cluster=cluster, folded=False, steps=2))
        device_opt = [c.duration_s for t, c in zip(plain_priced.graph.tasks, plain_priced.costs, strict=True)
                      if t.kind == "optimizer" and t.step == 0 and t.rank == 0]
        host_opt = [c.duration_s for t, c in zip(priced.graph.tasks, priced.costs, strict=True)
                    if t.name == "cpu optimizer" and t.step == 0 and t.rank == 0]
        assert len(device_opt) == len(host_opt) == 1
        assert host_opt == [pytest.approx(device_opt[0], rel=1e-9)]
    else:
        slowest_Bps = min(HostOpPricer(cluster).pcie_GBps(d) for d in ("to_host", "to_device")) * 1e9
        assert copies and all(0 < seconds <= nbytes / slowest_Bps * (1 + 1e-9) for nbytes, seconds in copies)
        assert all(seconds >= nbytes / (cluster.pcie.bandwidth_GBps * 1e9) for nbytes, seconds in copies)


@pytest.mark.parametrize(("gloo_host", "lane"), [(True, "compute"), (False, "host")])
def test_host_optimizer_is_the_cpu_ranks_own_compute(gloo_host: bool, lane: str) -> None:
    """With CPU processes as devices the offloaded optimizer is the rank's own compute (its
    trace labels it so; it shares the node's cores); with GPUs it is host work beside the GPU."""
    plan = ParallelPlan(framework="torch", dtype="fp32", dp=DP, zero=3, global_batch=DP, offload="optimizer")
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(get_model("tiny"), plan, schedule, lambda tp, cp, dp, pp: dp,
                             BuildOptions(folded=False, gloo_host=gloo_host))
    steps = [t for t in graph.tasks if t.name == "cpu optimizer"]
    assert steps and all(t.lane == lane and all(op.lane == lane for op in t.ops) for t in steps)
