"""The cluster graph and the structural router, checked against networkx itself."""

from __future__ import annotations

import time

import networkx as nx
import pytest

from topo import Router, build_cluster_graph, get_cluster
from topo.graph import cluster_elements


@pytest.mark.parametrize("name", ["dgx-h100", "aws-p4d", "aws-p5", "pcie-4090", "gcp-a3"])
def test_graph_counts_and_attributes(name: str) -> None:
    spec = get_cluster(name, nodes=3)
    g = build_cluster_graph(spec)
    kinds = nx.get_node_attributes(g, "kind")
    count = {k: sum(1 for v in kinds.values() if v == k) for k in set(kinds.values())}
    assert count["gpu"] == spec.num_gpus
    assert count["nic"] == 3 * min(spec.nics_per_node, spec.gpus_per_node)
    assert count["pcie_switch"] == 3 * spec.pcie_switches_per_node
    assert count["cpu"] == 3 * spec.host.cpu_sockets
    assert count.get("nvswitch", 0) == (3 if spec.intra_node == "nvswitch" else 0)
    for _, data in g.nodes(data=True):
        assert {"kind", "node", "local"} <= set(data)
    for _, _, data in g.edges(data=True):
        assert {"bandwidth_GBps", "latency_s", "link", "efficiency"} <= set(data)
    assert nx.is_connected(g)
    gpu_degrees = {d for v, d in g.degree() if kinds[v] == "gpu"}
    assert gpu_degrees == ({2} if spec.intra_node == "nvswitch" else {1})


def test_rail_optimized_wiring() -> None:
    spec = get_cluster("dgx-h100", nodes=3)
    g = build_cluster_graph(spec)
    for node in range(3):
        for i in range(8):
            assert g.has_edge(f"n{node}.nic{i}", f"leaf0.rail{i}")
    assert g.degree("leaf0.rail5") == 3 + 1  # three nodes' NIC 5 + the uplink to core


def test_leaf_uplink_is_downlink_over_oversubscription() -> None:
    spec = get_cluster("aws-p4d", nodes=64).with_overrides({"oversubscription": 4.0})
    g = build_cluster_graph(spec)
    down = 16 * 4 * 12.5  # 16 nodes per leaf x 4 NICs x 100 Gb/s
    assert g.edges["leaf0", "core"]["bandwidth_GBps"] == pytest.approx(down / 4)
    assert g.number_of_edges() < 2 * g.number_of_nodes()


def test_p5_groups_four_efa_ports_per_gpu() -> None:
    g = build_cluster_graph(get_cluster("aws-p5", nodes=2))
    assert g.edges["n0.nic3", "leaf0"]["bandwidth_GBps"] == pytest.approx(4 * 12.5)
    assert g.nodes["n0.nic3"]["ports"] == 4


@pytest.mark.parametrize("name", ["aws-p4d", "aws-p5", "pcie-4090", "cpu-host", "dgx-a100"])
def test_routes_are_valid_shortest_paths(name: str) -> None:
    spec = get_cluster(name) if name == "cpu-host" else get_cluster(name, nodes=3)
    g = build_cluster_graph(spec)
    router = Router(spec, g)
    rail = spec.fabric == "rail-optimized"
    for a in range(0, spec.num_gpus, 3):
        for b in range(spec.num_gpus):
            path = router.vertex_path(a, b)
            assert all(g.has_edge(u, v) for u, v in zip(path[:-1], path[1:], strict=True))
            edges, latency = router.route(a, b)
            assert edges == router.edges_of(path)
            assert latency == pytest.approx(sum(g.edges[u, v]["latency_s"] for u, v in zip(path[:-1], path[1:], strict=True)))
            if not rail or spec.local_of(a) == spec.local_of(b):  # rail-crossing goes via the core
                assert len(path) - 1 == nx.shortest_path_length(g, path[0], path[-1])


def test_pcie_routes_without_p2p_bounce_through_the_cpu() -> None:
    spec = get_cluster("pcie-4090").with_overrides({"gpus_per_pcie_switch": 2})
    router = Router(spec)
    assert router.vertex_path(0, 1) == ["n0.gpu0", "n0.pcie0", "n0.cpu0", "n0.pcie0", "n0.gpu1"]
    p2p = Router(spec.with_overrides({"pcie_p2p": True}))
    assert p2p.vertex_path(0, 1) == ["n0.gpu0", "n0.pcie0", "n0.gpu1"]
    assert p2p.vertex_path(0, 7)[2:4] == ["n0.cpu0", "n0.cpu1"]


def test_cross_node_route_uses_the_closest_nic() -> None:
    router = Router(get_cluster("aws-p4d", nodes=2))
    assert router.vertex_path(1, 14) == ["n0.gpu1", "n0.pcie0", "n0.nic0", "leaf0", "n1.nic3",
                                         "n1.pcie3", "n1.gpu6"]


@pytest.mark.slow
def test_16k_gpu_graph_builds_in_seconds() -> None:
    spec = get_cluster("dgx-h100", nodes=2048)
    start = time.process_time()  # CPU time: other load on the machine does not count
    vertices, edges = cluster_elements(spec)
    elapsed = time.process_time() - start
    assert sum(1 for _, d in vertices if d["kind"] == "gpu") == 16384
    assert len(edges) < 100_000
    assert elapsed < 20.0  # about 0.5 s on an idle core; generous for shared CI machines
