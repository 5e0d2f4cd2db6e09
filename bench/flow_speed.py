"""Benchmark: wall time of the flow-level network model (``--fidelity flow``).

1. One all-reduce over 1,024 GPUs (128 DGX H100 nodes, rail-optimized InfiniBand), decomposed into
   NCCL's flows and run on the event-driven max-min network (ring, and the algorithm the model
   selects), with the analytic time beside it.
2. A full 3D-parallel training step: Llama-3 70B on 128 DGX H100 nodes, TP8 PP4 DP32, 1F1B,
   global batch 512, micro-batch 1, folded (one simulated rank per pipeline stage; its DP groups'
   and pipeline peers' flows are all injected), flow vs analytic.

    nice -n 19 python bench/flow_speed.py            # speed
    nice -n 19 python bench/flow_speed.py --figure   # docs/congestion.html (two transfers on one NIC)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import simpy

from core.vocab import Kind, Lane, OpClass
from sim.flow.decompose import FlowPlanner
from sim.flow.maxmin import incidence_of
from sim.flow.network import FlowNetwork
from sim.job import resolve_job
from sim.pricing import TaskCoster
from sim.simulate import simulate
from topo import get_cluster
from topo.collectives import CollectiveModel
from topo.placement import Placement

STEP = {"model": "llama3-70b", "cluster": "dgx-h100", "nodes": 128, "tp": 8, "pp": 4, "dp": 32,
        "global_batch": 512, "microbatch_size": 1, "schedule": "1f1b"}


def all_reduce_1024(algorithm: str, size: float = 1 << 30) -> None:
    """Decompose and run one 1,024-GPU all-reduce; print flows, wall time, simulated time."""
    model = CollectiveModel(get_cluster("dgx-h100", nodes=128))
    t0 = time.perf_counter()
    group = range(1024)
    chosen = model.collective("all_reduce", size, group).algorithm if algorithm == "auto" else algorithm
    flows = model.flows("all_reduce", size, group, algorithm=chosen)
    t1 = time.perf_counter()
    env = simpy.Environment()
    net = FlowNetwork(env, 1.0 / model.router.seconds_per_byte)
    planner = FlowPlanner(TaskCoster(model, Placement(sizes={"dp": 1024}), dtype="bf16",
                                     gpus_per_node=8), folded=False)
    for phase in sorted({f.phase for f in flows}):
        mine = [f for f in flows if f.phase == phase]
        env.run(net.transfer(incidence_of([f.edges for f in mine]),
                             [planner.effective_bytes(f) for f in mine]))
    t2 = time.perf_counter()
    analytic = model.collective("all_reduce", size, group, algorithm=chosen).time_s
    print(f"all_reduce 1 GiB on 1024 GPUs, {chosen}: {len(flows)} flows, "
          f"{sum(len(f.edges) for f in flows)} flow-links, {net.recomputes} rate recomputations; "
          f"decompose {t1 - t0:.2f} s + flow simulation {t2 - t1:.2f} s wall; "
          f"bytes alone {env.now * 1e3:.2f} ms, analytic (latency + protocol) {analytic * 1e3:.2f} ms")


def step(fidelity: str) -> None:
    """Simulate the 3D step with ``fidelity``; print wall and simulated step time."""
    t0 = time.perf_counter()
    result = simulate(resolve_job({**STEP, "fidelity": fidelity}))
    wall = time.perf_counter() - t0
    m = result.metrics
    print(f"llama3-70b 1024 H100 TP8 PP4 DP32 gb512 1F1B folded, {fidelity:8s}: wall {wall:.2f} s, "
          f"step {m.step_time_s:.4f} s, exposed comm {m.exposed_comm_fraction:.4f}")



def congestion_figure(html: str = str(Path(__file__).resolve().parents[1] / "docs" / "congestion.html")) -> None:
    """Four DGX H100 nodes, TP8 PP2 DP2: rank 0's DP all-reduce (ring with rank 8 on the next node)
    starts at 0; 4 ms later rank 0 sends a 1 GB activation to its pipeline peer on another node
    through the same NIC. Plots each transfer's rate on that NIC over time (flow mode)."""
    import plotly.graph_objects as go

    from core.groups import DP, PP
    from core.taskgraph import Op, Task, TaskGraphBuilder
    from sim.engine import Engine
    from sim.flow.transport import FlowTransport
    from sim.pricing import cost_graph

    cluster = get_cluster("dgx-h100", nodes=4)
    placement = Placement(sizes={"tp": 8, "cp": 1, "dp": 2, "pp": 2})
    coster = TaskCoster(CollectiveModel(cluster), placement, dtype="bf16", gpus_per_node=8)
    peer = placement.rank_of(tp=0, cp=0, dp=0, pp=1)
    builder = TaskGraphBuilder()
    builder.add(Task(rank=0, lane=Lane.DP, kind=Kind.ALL_REDUCE, name="DP all-reduce 4 GB",
                   ops=(Op(Lane.DP, Kind.ALL_REDUCE, "grads", OpClass.ALL_REDUCE, bytes=4e9, dim=DP),)))
    wait = builder.add(Task(rank=0, lane=Lane.COMPUTE, kind=Kind.FWD, name="wait", ops=(Op(Lane.COMPUTE, Kind.FWD, "w", OpClass.FIXED,
                                                                                     duration_s=4e-3),)))
    builder.add(Task(rank=0, lane=Lane.PP, kind=Kind.SEND, name="PP send 1 GB", peer=peer, ordered=False,
                   ops=(Op(Lane.PP, Kind.SEND, "act", OpClass.P2P, bytes=1e9, dim=PP),)), [wait])
    graph = builder.build()
    holder: list[FlowTransport] = []

    def make(env: simpy.Environment) -> FlowTransport:
        holder.append(FlowTransport(env, coster, folded=False, record=True))
        return holder[0]

    result = Engine(graph, cost_graph(graph, coster), gpus_per_node=8, flows=make).run()
    net = holder[0].network
    nic = next(e for e in coster.collectives.router.route(0, peer)[0]
               if coster.collectives.router.ends[e][0].endswith("nic0"))
    fig = go.Figure()
    traces = (("DP all-reduce", "DP all-reduce 4 GB (its flows on the NIC)"), ("PP send", "PP send 1 GB"))
    for task_id, (label, name) in zip((0, 2), traces, strict=True):
        pts = [(s.time_s, s.on_link(nic) / 1e9) for s in net.samples if s.label.startswith(label)]
        pts.append((float(result.end_s[task_id]), 0.0))
        fig.add_trace(go.Scatter(x=[t * 1e3 for t, _ in pts], y=[r for _, r in pts], name=name,
                                 line_shape="hv", mode="lines"))
    fig.update_layout(title=f"Two transfers share rank 0's NIC ({coster.collectives.router.ends[nic][0]} → leaf), "
                            "max-min fair", xaxis_title="simulated time (ms)", yaxis_title="rate on the NIC (GB/s)",
                      width=900, height=420, template="plotly_white")
    fig.write_html(html, include_plotlyjs=True, config={"displayModeBar": False})
    for i, t in enumerate(graph.tasks):
        print(f"{t.name:20s} start {result.start_s[i] * 1e3:7.3f} ms  end {result.end_s[i] * 1e3:7.3f} ms")


if __name__ == "__main__":
    if "--figure" in sys.argv:
        congestion_figure()
    else:
        all_reduce_1024("ring")
        all_reduce_1024("auto")
        step("analytic")
        step("flow")
