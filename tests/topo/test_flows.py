"""Collective -> flow decomposition: bytes each algorithm must move, valid edge paths, and the
same link loads as the analytic model."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from topo import CollectiveModel, get_cluster
from topo import algorithms as alg
from topo.loads import LinkLoads

S = 3e8


@pytest.fixture(scope="module")
def h100x2() -> CollectiveModel:
    return CollectiveModel(get_cluster("dgx-h100", nodes=2))


def sent_and_received(flows) -> tuple[dict[int, float], dict[int, float]]:
    sent: dict[int, float] = defaultdict(float)
    received: dict[int, float] = defaultdict(float)
    for f in flows:
        sent[f.src_device] += f.bytes
        received[f.dst_device] += f.bytes
    return sent, received


def assert_paths(model: CollectiveModel, flows) -> None:
    """Every flow's edges chain from its source device's vertex to its destination's."""
    router, spec = model.router, model.cluster
    for f in flows:
        tails = [router.ends[e][0] for e in f.edges]
        heads = [router.ends[e][1] for e in f.edges]
        assert tails[1:] == heads[:-1]
        for device, end in ((f.src_device, tails[0]), (f.dst_device, heads[-1])):
            if device >= 0:
                assert end == f"n{spec.node_of(device)}.gpu{spec.local_of(device)}"


def edge_bytes(flows) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for f in flows:
        for e in f.edges:
            out[e] += f.bytes
    return out


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_ring_moves_what_the_algorithm_must(h100x2: CollectiveModel, op: str) -> None:
    n = 16
    flows = h100x2.flows(op, S, range(n), algorithm="ring")
    sent, received = sent_and_received(flows)
    per_rank = {"all_reduce": 2 * (n - 1) / n * S, "broadcast": S}.get(op, (n - 1) / n * S)
    senders = range(n - 1) if op == "broadcast" else range(n)  # a chain: the last rank only receives
    assert {d: pytest.approx(per_rank) for d in senders} == dict(sent)
    assert len({f.channel for f in flows}) == 2 * 8  # two channels per NIC, NCCL's duplication
    assert_paths(h100x2, flows)


def test_ring_flows_load_the_fabric_like_the_link_model(h100x2: CollectiveModel) -> None:
    router = h100x2.router
    flows = h100x2.flows("all_reduce", S, range(16), algorithm="ring")
    loads = LinkLoads(router)
    alg.fill_ring_all_reduce(loads, router, np.arange(16))
    coef = loads.totals()
    per_edge = edge_bytes(flows)
    fabric = [e for e in range(len(router.ends))
              if {router.vertex_attrs[v]["kind"] for v in router.ends[e]} & {"leaf", "core"}]
    assert fabric and all(per_edge.get(e, 0.0) == pytest.approx(coef[e] * S) for e in fabric)


def test_tree_moves_2_n_minus_1_times_s(h100x2: CollectiveModel) -> None:
    n = 16
    flows = h100x2.flows("all_reduce", S, range(n), algorithm="tree")
    assert sum(f.bytes for f in flows) == pytest.approx(2 * (n - 1) * S)  # up and down a spanning tree
    sent, received = sent_and_received(flows)
    assert sum(sent.values()) == pytest.approx(sum(received.values()))
    assert_paths(h100x2, flows)


def test_nvls_flows_meet_the_switch() -> None:
    model = CollectiveModel(get_cluster("dgx-h100"))
    flows = model.flows("all_reduce", S, range(8))  # auto: NVLS on one H100 node
    assert {f.kind for f in flows} == {"nvls"}
    sent, received = sent_and_received(flows)
    for gpu in range(8):
        assert sent[gpu] == pytest.approx(S * 9 / 8) and received[gpu] == pytest.approx(S * 9 / 8)
    assert_paths(model, flows)


def test_nvls_tree_adds_each_heads_shard(h100x2: CollectiveModel) -> None:
    flows = h100x2.flows("all_reduce", S, range(16))
    assert {f.kind for f in flows} == {"nvls", "p2p"}
    net = [f for f in flows if f.kind == "p2p"]
    sent, _ = sent_and_received(net)
    assert all(sent[d] == pytest.approx(S / 8) for d in range(16))  # shard S/8 on two half-trees


def test_hierarchical_phases_and_exact_link_loads(h100x2: CollectiveModel) -> None:
    m, k = 2, 8
    flows = h100x2.flows("all_reduce", S, range(16), algorithm="hierarchical")
    phase_bytes = defaultdict(float)
    for f in flows:
        phase_bytes[f.phase] += f.bytes
    assert phase_bytes[0] == phase_bytes[2] == pytest.approx(m * k * (k - 1) / k * S)
    assert phase_bytes[1] == pytest.approx(m * k * 2 * (m - 1) / m * S / k)
    loads = LinkLoads(h100x2.router)
    alg.fill_hierarchical_all_reduce(loads, h100x2.router, np.arange(16))
    coef, per_edge = loads.totals(), edge_bytes(flows)
    assert all(per_edge.get(e, 0.0) == pytest.approx(coef[e] * S) for e in range(len(coef)))


def test_all_to_all_and_trivial_cases(h100x2: CollectiveModel) -> None:
    n = 12
    group = list(range(2, 14))
    flows = h100x2.flows("all_to_all", S, group)
    sent, received = sent_and_received(flows)
    assert all(sent[d] == pytest.approx((n - 1) / n * S) == received[d] for d in group)
    assert h100x2.flows("all_reduce", S, [3]) == [] and h100x2.flows("all_reduce", 0, range(8)) == []
    with pytest.raises(ValueError, match="nvls"):
        CollectiveModel(get_cluster("dgx-a100")).flows("all_reduce", S, range(8), algorithm="nvls")
