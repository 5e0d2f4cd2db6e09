"""Collective cost model: closed forms, nccl-tests definitions, and physical monotonicity."""

from __future__ import annotations

import pytest
from cluster_builders import OVERHEAD_S, nic_ring_cluster, nvswitch_cluster

from topo import OPS, CollectiveModel, Placement, bus_factor, get_cluster, get_link

GB = 1e9


@pytest.mark.parametrize("n", [2, 3, 4, 7])
@pytest.mark.parametrize("size", [1e3, 1e6, 1e9])
def test_ring_all_reduce_closed_form_across_nodes(n: int, size: float) -> None:
    # each hop: GPU-PCIe(4 PCIe edges, 0.5 us)-NIC-leaf-NIC(2 NIC edges, 2 us); NIC 10 GB/s x 0.5
    model = CollectiveModel(nic_ring_cluster(n))
    cost = model.collective("all_reduce", size, range(n), algorithm="ring")
    alpha, bandwidth = 4 * 0.5e-6 + 2 * 2e-6, 5.0 * GB
    expected = OVERHEAD_S + 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * alpha
    assert cost.time_s == pytest.approx(expected, rel=1e-12)
    assert cost.algorithm == "ring" and "nic-test" in cost.bottleneck


@pytest.mark.parametrize("n", [2, 4, 8])
def test_single_node_closed_forms(n: int) -> None:
    model = CollectiveModel(nvswitch_cluster(n, bw=100.0, eff=0.8, lat=1e-6))
    size, bandwidth, alpha = 3e8, 80.0 * GB, 2e-6  # a hop is GPU -> switch -> GPU
    devices = range(n)

    def t(op: str, algorithm: str = "ring") -> float:
        return model.collective(op, size, devices, algorithm=algorithm).time_s - OVERHEAD_S

    assert t("all_reduce") == pytest.approx(2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * alpha)
    for op in ("all_gather", "reduce_scatter"):
        assert t(op) == pytest.approx((n - 1) / n * size / bandwidth + (n - 1) * alpha)
    assert t("broadcast") == pytest.approx(size / bandwidth + (n - 1) * alpha)
    assert t("all_to_all", "direct") == pytest.approx((n - 1) / n * size / bandwidth + alpha)
    # chain (tree inside one node): a middle GPU sends S up and S down through its one port
    chain_load = 2 if n > 2 else 1
    assert t("all_reduce", "tree") == pytest.approx(chain_load * size / bandwidth + 2 * (n - 1) * alpha)


def test_nvls_closed_form() -> None:
    n = 8
    model = CollectiveModel(nvswitch_cluster(n, bw=100.0, eff=0.8, lat=1e-6, nvls=0.6))
    cost = model.collective("all_reduce", 1e9, range(n), algorithm="nvls")
    assert cost.time_s == pytest.approx(OVERHEAD_S + 2 * 2e-6 + 1e9 * (n + 1) / n / (60.0 * GB))
    with pytest.raises(ValueError, match="nvls"):
        CollectiveModel(get_cluster("dgx-a100")).collective("all_reduce", 1e9, range(8), algorithm="nvls")


def test_hierarchical_closed_form_on_p4de() -> None:
    # 2 nodes x 8 A100, 4 x 100G EFA: each GPU all-reduces S/8 with its peer; 2 GPUs share a NIC.
    spec = get_cluster("aws-p4de", nodes=2)
    nvl, pcie, efa = get_link("nvlink3"), get_link("pcie-gen4"), get_link("efa-100g")
    size = 1e9
    cost = CollectiveModel(spec).collective("all_reduce", size, range(16), algorithm="hierarchical")
    nic_load = 2 * (2 * (2 - 1) / 2) / 8
    net_hop = 4 * pcie.latency_s + 2 * efa.latency_s
    latency = spec.device.collective_overhead_s + 2 * 7 * (2 * nvl.latency_s) + 2 * 1 * net_hop
    assert cost.time_s == pytest.approx(latency + size * nic_load / (efa.effective_GBps * GB))


def test_busbw_definition_consistency() -> None:
    spec = get_cluster("aws-p4d", nodes=2)
    model = CollectiveModel(spec)
    groups = [range(16), range(8), (0, 8), (0, 1, 2, 9, 10, 11), range(0, 16, 2)]
    factors = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
               "broadcast": lambda n: 1.0}
    for op in OPS:
        for group in groups:
            n, size = len(tuple(group)), 123456789.0
            cost = model.collective(op, size, group)
            assert cost.algbw_GBps == pytest.approx(size / cost.time_s / GB)
            assert cost.busbw_GBps == pytest.approx(cost.algbw_GBps * factors[op](n))
            assert bus_factor(op, n) == pytest.approx(factors[op](n))
    p2p = model.p2p(1e8, 0, 9)
    assert p2p.busbw_GBps == pytest.approx(p2p.algbw_GBps) == pytest.approx(1e8 / p2p.time_s / GB)


def test_trivial_and_ideal_cases() -> None:
    model = CollectiveModel(get_cluster("dgx-h100", nodes=2))
    assert model.collective("all_reduce", 1e9, [5]).time_s == 0.0
    assert model.collective("all_reduce", 0, range(8)).time_s == 0.0
    assert model.p2p(1e9, 3, 3).time_s == 0.0
    ideal = CollectiveModel(get_cluster("dgx-h100", nodes=2048), ideal=True)
    assert ideal.collective("all_gather", 1e9, range(16384)).time_s == 0.0
    assert ideal.p2p(1e9, 0, 9000).time_s == 0.0


def test_bad_arguments() -> None:
    model = CollectiveModel(get_cluster("dgx-h100"))
    with pytest.raises(ValueError, match="op"):
        model.collective("allreduce", 1e6, range(8))
    with pytest.raises(ValueError, match="ring"):
        model.collective("all_gather", 1e6, range(8), algorithm="tree")
    with pytest.raises(ValueError, match="device"):
        model.collective("all_reduce", 1e6, [0, 8])
    with pytest.raises(ValueError, match="distinct"):
        model.collective("all_reduce", 1e6, [0, 0])
    with pytest.raises(ValueError, match="size_bytes"):
        model.collective("all_reduce", -1, range(8))


def test_tp_across_nodes_costs_more_than_inside() -> None:
    spec = get_cluster("dgx-h100", nodes=4)
    model = CollectiveModel(spec)
    for order in (("tp", "dp", "cp", "pp"), ("dp", "tp", "cp", "pp")):
        p = Placement(sizes={"tp": 8, "dp": 4}, order=order)
        groups = p.groups("tp")
        cost = model.collective("all_reduce", 64e6, groups[0], concurrent=groups)
        if order[0] == "tp":
            inside = cost
        else:
            across = cost
    assert across.time_s > 3 * inside.time_s
    assert "nvlink4" in inside.bottleneck and "ib-ndr" in across.bottleneck


def test_two_gpus_sharing_a_nic_get_half_the_bandwidth() -> None:
    p4d = get_cluster("aws-p4d", nodes=2)
    rail_per_gpu = p4d.with_overrides({"nics_per_node": 8})  # same 100G EFA NIC, one per GPU
    dp_groups = [(local, 8 + local) for local in range(8)]  # DP of a TP8 job: 8 groups at once
    big, small = 8e9, 4e9

    def bandwidth_term(spec, op: str) -> float:  # latency cancels in the difference
        model = CollectiveModel(spec)
        t = [model.collective(op, s, dp_groups[0], concurrent=dp_groups).time_s for s in (big, small)]
        return (big - small) / (t[0] - t[1])

    for op in ("all_reduce", "all_gather", "broadcast"):
        assert bandwidth_term(p4d, op) == pytest.approx(0.5 * bandwidth_term(rail_per_gpu, op))
    pairs = [(g[0], g[1]) for g in dp_groups]
    shared = CollectiveModel(p4d).p2p(big, 0, 8, concurrent=pairs)
    alone = CollectiveModel(p4d).p2p(big, 0, 8)
    assert shared.time_s > 1.9 * alone.time_s


def test_results_are_cached_and_shift_invariant() -> None:
    spec = get_cluster("dgx-h100", nodes=64)  # two scalable units of 32 nodes
    model = CollectiveModel(spec)
    group = tuple(range(0, 32 * 8, 8))
    shifted = tuple(d + 32 * 8 for d in group)
    a = model.collective("all_reduce", 1e9, group)
    b = model.collective("all_reduce", 1e9, shifted)
    assert a == b
    assert model.collective("all_reduce", 1e9, group) == a


def test_all_to_all_closed_form_across_nodes() -> None:
    n = 5
    model = CollectiveModel(nic_ring_cluster(n))
    cost = model.collective("all_to_all", 1e9, range(n))
    assert cost.time_s == pytest.approx(OVERHEAD_S + (n - 1) / n * 1e9 / (5.0 * GB) + 6e-6)


def test_p2p_closed_form() -> None:
    model = CollectiveModel(nic_ring_cluster(3))
    assert model.p2p(2e9, 0, 2).time_s == pytest.approx(OVERHEAD_S + 2e9 / (5.0 * GB) + 6e-6)
