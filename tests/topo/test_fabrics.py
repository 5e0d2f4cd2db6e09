"""Fabric presets and the three-tier Clos: graph capacities, routes against networkx, and
oversubscription properties (hypothesis)."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo import CollectiveModel, Placement, Router, build_cluster_graph, get_cluster

FABRIC_PRESETS = {"dgx-h100-superpod": "rail-optimized", "dgx-h100": "rail-optimized",
                  "llama3-h100-roce": "fat-tree", "hgx-h100-roce": "fat-tree", "aws-p4d": "fat-tree",
                  "aws-p5": "fat-tree", "pcie-4090": "fat-tree"}


def small_clos(pod_oversubscription: float = 7.0, rail: bool = False):
    """12 nodes, 2 per leaf (ToR), 2 leaf blocks per pod -> 3 pods (the Llama 3 shape, shrunk)."""
    base = get_cluster("dgx-h100-superpod" if rail else "llama3-h100-roce", nodes=12)
    return base.with_overrides({"nodes_per_leaf": 2, "leaf_blocks_per_pod": 2,
                                "pod_oversubscription": pod_oversubscription})


def test_fabric_presets() -> None:
    for name, fabric in FABRIC_PRESETS.items():
        assert get_cluster(name).fabric == fabric, name
    llama = get_cluster("llama3-h100-roce")
    # Llama 3 paper 3.3.1: 24K GPUs, 16 GPUs per ToR, 3,072 GPUs per pod, 1:7 above the pods
    assert llama.num_gpus == 24576 and llama.nodes_per_leaf * llama.gpus_per_node == 16
    assert llama.period_nodes * llama.gpus_per_node == 3072 and llama.num_pods == 8
    assert llama.pod_oversubscription == 7.0 and llama.nic.gbps == pytest.approx(400)  # type: ignore[union-attr]
    assert llama.nic.kind == "ethernet" and get_cluster("hgx-h100-roce").nic.kind == "ethernet"  # type: ignore[union-attr]
    assert get_cluster("aws-p5").nic.kind == get_cluster("aws-p4d").nic.kind == "efa"  # type: ignore[union-attr]
    box = get_cluster("pcie-4090")
    assert box.nvlink is None and box.intra_node == "pcie" and not box.pcie_p2p


def test_pcie_box_routes_through_the_root_complex() -> None:
    router = Router(get_cluster("pcie-4090"))
    for a, b in ((0, 1), (0, 7), (3, 4)):
        path = router.vertex_path(a, b)
        assert any(v.startswith("n0.cpu") for v in path) and "nvswitch" not in "".join(path)


def test_three_tier_graph_capacities() -> None:
    spec = small_clos()
    g = build_cluster_graph(spec)
    kinds = nx.get_node_attributes(g, "kind")
    assert sum(k == "pod" for k in kinds.values()) == 3 and sum(k == "leaf" for k in kinds.values()) == 6
    leaf_down = 2 * 8 * 50.0  # 2 nodes x 8 NICs x 400 Gb/s under one ToR
    assert g.edges["leaf0", "pod0"]["bandwidth_GBps"] == pytest.approx(leaf_down)
    assert g.edges["pod0", "core"]["bandwidth_GBps"] == pytest.approx(2 * leaf_down / 7)
    assert not g.has_edge("leaf0", "core")
    one_pod = build_cluster_graph(spec.with_overrides({"nodes": 4}))
    assert "core" not in one_pod and one_pod.has_edge("leaf1", "pod0")


@pytest.mark.parametrize("rail", [False, True])
def test_three_tier_routes_are_shortest_valid_paths(rail: bool) -> None:
    spec = small_clos(rail=rail)
    g = build_cluster_graph(spec)
    router = Router(spec, g)
    for a in range(0, spec.num_gpus, 5):
        for b in range(spec.num_gpus):
            if a == b:
                continue
            path = router.vertex_path(a, b)
            hops = list(zip(path[:-1], path[1:], strict=True))
            assert all(g.has_edge(u, v) for u, v in hops)
            edges, latency = router.route(a, b)
            assert edges == router.edges_of(path)
            assert latency == pytest.approx(sum(g.edges[u, v]["latency_s"] for u, v in hops))
            assert router.latencies([a], [b])[0] == pytest.approx(latency)
            if not rail or spec.local_of(a) == spec.local_of(b):  # rail changes ride the fabric
                assert len(hops) == nx.shortest_path_length(g, path[0], path[-1])
    # across pods the route climbs to the core; inside a pod it turns at the pod layer
    assert "core" in router.vertex_path(0, spec.num_gpus - 1)
    assert "core" not in router.vertex_path(0, 3 * spec.gpus_per_node)


def test_oversubscribed_core_slows_cross_pod_data_parallelism() -> None:
    dp = Placement(sizes={"tp": 8, "dp": 12}).groups("dp")  # every GPU: its DP group spans 3 pods
    costs = {os: CollectiveModel(small_clos(os)).collective("all_reduce", 1e9, dp[0], concurrent=dp,
                                                            algorithm="ring", protocol="Simple")
             for os in (1.0, 7.0)}
    assert costs[7.0].time_s > 1.5 * costs[1.0].time_s
    assert "pod->core" in costs[7.0].bottleneck


MODELS: dict[float, CollectiveModel] = {}


def model(pod_oversubscription: float) -> CollectiveModel:
    if pod_oversubscription not in MODELS:
        MODELS[pod_oversubscription] = CollectiveModel(small_clos(pod_oversubscription))
    return MODELS[pod_oversubscription]


@settings(max_examples=50, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), order=st.permutations(("tp", "dp")),
       op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]),
       size=st.floats(min_value=1e4, max_value=1e10), together=st.booleans(),
       more=st.sampled_from([1.5, 3.0, 7.0]))
@pytest.mark.slow
def test_more_pod_oversubscription_is_never_faster(tp, order, op, size, together, more) -> None:
    groups = Placement(sizes={"tp": tp, "dp": 96 // tp}, order=tuple(order)).groups("dp")
    concurrent = groups if together else []
    base = model(1.0).collective(op, size, groups[0], concurrent=concurrent)
    worse = model(more).collective(op, size, groups[0], concurrent=concurrent)
    assert worse.time_s >= base.time_s * (1 - 1e-12)
