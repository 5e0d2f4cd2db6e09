"""Offload copies as flows (--fidelity flow): the links they cross, sharing with each other and
with NIC traffic, the drives' read and write rates, and nothing to move on a CPU host."""

from __future__ import annotations

import pytest

from core.groups import PP
from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from sim.engine import Engine
from sim.flow.decompose import FlowPlanner
from sim.flow.host_copies import host_copy_vertices
from sim.flow.transport import flow_factory
from sim.host_pricing import HostOpPricer
from sim.pricing import TaskCoster, cost_graph
from topo import get_cluster, naming
from topo.collectives import CollectiveModel
from topo.memory import host_copy_GBps
from topo.placement import Placement

SIZE = 4e9  # bytes


def _coster(cluster_name: str = "dgx-h100", nodes: int = 1, pp: int = 1) -> TaskCoster:
    cluster = get_cluster(cluster_name, nodes=nodes)
    gpus = cluster.gpus_per_node
    tp = gpus // pp if cluster_name != "cpu-host" else 1
    dp = nodes * gpus // (tp * pp)
    placement = Placement(sizes={"tp": tp, "cp": 1, "dp": dp, "pp": pp}, order=("tp", "cp", "dp", "pp"))
    return TaskCoster(CollectiveModel(cluster), placement, dtype="bf16", gpus_per_node=gpus,
                      host_ops=HostOpPricer(cluster).op_time_s)


def _copy(rank: int, op_class: str, size: float = SIZE) -> Task:
    lane = "host" if op_class.startswith("nvme") else "memcpy"
    op = Op(lane, Kind.OFFLOAD, op_class, op_class, bytes=size)
    return Task(rank=rank, lane=lane, kind=Kind.OFFLOAD, name=op_class, ops=(op,))


def _send(rank: int, peer: int, size: float = SIZE) -> Task:
    op = Op(Lane.PP, Kind.SEND, "act", OpClass.P2P, bytes=size, dim=PP)
    return Task(rank=rank, lane=Lane.PP, kind=Kind.SEND, name="act", ops=(op,), peer=peer, ordered=False)


def _run(tasks: list[Task], coster: TaskCoster, fidelity: str = "flow") -> list[float]:
    graph = TaskGraph.of(tasks, [()] * len(tasks))
    engine = Engine(graph, cost_graph(graph, coster), gpus_per_node=coster.gpus_per_node,
                    flows=flow_factory(fidelity, coster, folded=False))
    result = engine.run()
    return list(result.end_s - result.start_s)


def test_a_copy_crosses_the_gpus_pcie_link_its_switch_uplink_and_dram() -> None:
    spec = get_cluster("dgx-h100")
    path = host_copy_vertices(spec, "pcie_to_host", 3)
    switch = spec.switch_of_local(3)
    assert path == [naming.gpu(0, 3), naming.pcie_switch(0, switch),
                    naming.cpu(0, spec.socket_of_switch(switch)), naming.dram(0)]
    assert host_copy_vertices(spec, "pcie_to_device", 3) == path[::-1]
    assert host_copy_vertices(spec, "nvme_write", 3) == [naming.dram(0), naming.cpu(0, 0), naming.nvme(0)]
    with pytest.raises(ValueError, match="op_class='cpu_adam' is invalid"):
        host_copy_vertices(spec, "cpu_adam", 3)


@pytest.mark.parametrize("op_class", ["pcie_to_host", "pcie_to_device"])
def test_every_gpu_copying_at_once_gets_the_even_split(op_class: str) -> None:
    """All 8 GPUs of a DGX H100 copy together: two GPUs share each PCIe switch's uplink, so each
    runs at half a PCIe link, the analytic model's even split (topo.memory.host_copy_GBps)."""
    coster = _coster()
    ends = _run([_copy(r, op_class) for r in range(8)], coster)
    cluster = get_cluster("dgx-h100")
    direction = "to_host" if op_class == "pcie_to_host" else "to_device"
    even = SIZE / (host_copy_GBps(cluster, "dram", direction, 8) * 1e9)
    assert ends == pytest.approx([even] * 8, rel=1e-9)
    assert ends == pytest.approx(_run([_copy(r, op_class) for r in range(8)], coster, "analytic"), rel=1e-9)


def test_a_copy_alone_runs_at_its_whole_pcie_link() -> None:
    """Not an assumed even split: one GPU copying alone gets its link (and its switch's uplink)."""
    (alone,) = _run([_copy(0, "pcie_to_host")], _coster())
    pcie = get_cluster("dgx-h100").pcie.effective_GBps * 1e9
    assert alone == pytest.approx(SIZE / pcie, rel=1e-9)
    (analytic,) = _run([_copy(0, "pcie_to_host")], _coster(), "analytic")
    assert analytic == pytest.approx(2 * alone, rel=1e-9)


def test_a_copy_and_a_send_through_the_nic_share_the_gpus_pcie_link() -> None:
    """GPU 0 offloads to DRAM while sending to the next node through its NIC (GPUDirect RDMA
    crosses the same GPU PCIe link): each is slower than alone."""
    coster = _coster(nodes=2, pp=2)
    (copy_alone,) = _run([_copy(0, "pcie_to_host")], coster)
    (send_alone,) = _run([_send(0, 8)], coster)
    copy_both, send_both = _run([_copy(0, "pcie_to_host"), _send(0, 8)], coster)
    assert copy_both > copy_alone * 1.2 and send_both > send_alone * 1.2


@pytest.mark.parametrize(("op_class", "rate"), [("nvme_read", "nvme_read_GBps"), ("nvme_write", "nvme_write_GBps")])
def test_nvme_reads_and_writes_run_at_the_drives_rates(op_class: str, rate: str) -> None:
    host = get_cluster("dgx-h100").host
    (alone,) = _run([_copy(0, op_class)], _coster())
    assert alone == pytest.approx(SIZE / (getattr(host, rate) * 1e9), rel=1e-9)
    pair = _run([_copy(0, op_class), _copy(5, op_class)], _coster())
    assert pair == pytest.approx([2 * alone] * 2, rel=1e-9)  # one set of drives per node


def test_folded_copy_carries_its_peers_on_the_node() -> None:
    """Folded (a simulated rank stands for the ranks of its stage), a copy is one flow per GPU of
    its stage on its node: 8 for PP1 on a DGX, 4 for PP2 (stages split the node)."""
    for pp, flows in ((1, 8), (2, 4)):
        coster = _coster(pp=pp)
        plan = FlowPlanner(coster, folded=True).plan(_copy(0, "pcie_to_host").ops[0], _copy(0, "pcie_to_host"))
        assert plan.alpha_s == 0.0 and plan.phases[0][1].size == flows


def test_nothing_moves_on_a_cpu_host() -> None:
    """On a CPU host the device's memory is the host's: the copy is free, as in analytic mode."""
    assert _run([_copy(0, "pcie_to_host")], _coster("cpu-host")) == [0.0]
