"""NCCL's algorithm x protocol model: closed forms from NCCL's published constants, selection,
and where protocols and algorithms apply. Constants are restated from NVIDIA/nccl v2.27.7
src/graph/tuning.cc (baseLat, hwLat, llMaxBws, perChMax*), src/enqueue.cc (chunk rules) and
src/transport/nvls.cc (16 NVLS channels on Hopper), independently of topo/nccl_tuning.py."""

from __future__ import annotations

import pytest
from cluster_builders import HOST, UPI, link

from topo import ClusterSpec, CollectiveModel, get_cluster, get_device, get_nccl_tuning

GB, MiB, US = 1e9, 2**20, 1e-6


def nccl_box(device: str, *, nvls: float = 0.0, gpus: int = 8) -> ClusterSpec:
    """One NVSwitch node, NVLink 100 GB/s x 0.8 (80 GB/s achievable), 12 links, NCCL 2.27."""
    nvlink = link("nvl-test", "nvlink", 100.0, 1e-6, 0.8, nvls).with_overrides({"links": 12})
    return ClusterSpec(name="nccl-test", device=get_device(device), nodes=1, gpus_per_node=gpus,
                       intra_node="nvswitch", nvlink=nvlink, pcie=link("pcie-test", "pcie", 50.0, 5e-7),
                       gpus_per_pcie_switch=1, fabric="single-node", host=HOST, socket_link=UPI,
                       nccl_version="2.27")


def two_nodes() -> ClusterSpec:
    """Two single-GPU nodes: NIC 10 GB/s x 0.5, 2 us per NIC edge, PCIe 0.5 us per edge."""
    nic = link("nic-test", "infiniband", 10.0, 2e-6, 0.5)
    return ClusterSpec(name="tree-test", device=get_device("a100-80gb"), nodes=2, gpus_per_node=1,
                       intra_node="pcie", pcie=link("pcie-test", "pcie", 100.0, 5e-7),
                       gpus_per_pcie_switch=1, nic=nic, nics_per_node=1, fabric="fat-tree",
                       nodes_per_leaf=2, host=HOST, socket_link=UPI, nccl_version="2.27")


@pytest.mark.parametrize("size", [1 * MiB, 64 * MiB, 1024 * MiB])
def test_ring_protocol_closed_forms(size: float) -> None:
    model = CollectiveModel(nccl_box("a100-80gb"))
    bus = 80.0  # ring busbw = the achievable NVLink bandwidth
    factor = 2 * 7 / 8

    def t(protocol: str) -> float:
        return model.collective("all_reduce", size, range(8), algorithm="ring", protocol=protocol).time_s

    # Simple: baseLat 8.4 + 14 steps x hwLat(NVLink, ring, Simple) 3.4 us, full link bandwidth
    assert t("Simple") == pytest.approx((8.4 + 14 * 3.4) * US + size * factor / (bus * GB))
    # LL: 6.6 + 14 x 0.6 us, half the bandwidth (2.27), under Ampere's one-node LL ceiling 87.7
    assert t("LL") == pytest.approx((6.6 + 14 * 0.6) * US + size * factor / (min(87.7, bus / 2) * GB))
    # LL128: 14 + 14 x 1.9 us, 0.92 of the bandwidth, under 12 channels x 20 GB/s
    assert t("LL128") == pytest.approx((14 + 14 * 1.9) * US + size * factor / (min(240, 0.92 * bus) * GB))


def test_protocol_follows_size_and_selection_is_nccls_minimum() -> None:
    model = CollectiveModel(nccl_box("a100-80gb"))
    # crossovers of the closed forms above: LL/LL128 at 1.28 MB, LL128/Simple at 8.1 MB
    picks = {size: model.collective("all_reduce", size, range(8)) for size in (1 * MiB, 4 * MiB, 64 * MiB)}
    assert [(c.algorithm, c.protocol) for c in picks.values()] == [
        ("ring", "LL"), ("ring", "LL128"), ("ring", "Simple")]
    # with every channel busy (>= 1 MiB here) a ring's time is NCCL's estimate: the pick is fastest
    for size, chosen in picks.items():
        for protocol in ("LL", "LL128", "Simple"):
            forced = model.collective("all_reduce", size, range(8), algorithm="ring", protocol=protocol)
            assert chosen.time_s <= forced.time_s * (1 + 1e-12)


def test_tree_pipeline_closed_form() -> None:
    # 2 nodes x 1 GPU: each node sends and receives S over its NIC (two trees of S/2): 5 GB/s.
    model = CollectiveModel(two_nodes())
    size = 64 * MiB
    cost = model.collective("all_reduce", size, [0, 1], algorithm="tree", protocol="Simple")
    algbw = min(2 * 5.0 * 0.92, 1 * 23.6) / 2  # x0.92 tree, perChMaxTreeBw Ampere 2 nodes, /2
    route = 4 * 0.5e-6 + 2 * 2e-6  # GPU-PCIe-NIC-leaf-NIC-PCIe-GPU
    latency = 8.4 * US + 2 * (14 * US + 2 * route)  # base + 2 x log2(2) x (hwLat NET + 2 x route)
    chunks = size / (2 * 512 * 1024)  # 2 channels, 512 KiB Simple chunks (4 MiB FIFO / 8)
    fill = 2  # up and down the one inter-node hop
    assert cost.time_s == pytest.approx(latency + size / (algbw * GB) * (chunks + fill) / chunks)


def test_nvls_pipeline_closed_form() -> None:
    model = CollectiveModel(nccl_box("h100-sxm", nvls=0.6))
    size = 64 * MiB
    cost = model.collective("all_reduce", size, range(8))
    assert (cost.algorithm, cost.protocol) == ("nvls", "Simple")
    algbw = 100 * 0.6 * 8 / 9  # each GPU moves S (k+1)/k each way at the NVLS efficiency
    # chunk 128 KiB -> 64 KiB below 64 x (16 channels x 8 heads) x 128 KiB; 8 chunks per channel
    # and head; 3 pipeline stages; latency hwLat(NVLink, NVLS) 25 us
    chunks = size / (16 * 8 * 64 * 1024)
    assert cost.time_s == pytest.approx(25 * US + size / (algbw * GB) * (chunks + 2) / chunks)
    small = model.collective("all_reduce", 1 * MiB, range(8), algorithm="nvls")
    # 1 MiB in 16 KiB chunks covers 8 of 16 channels: one chunk each, 3 stages, half the channels
    assert small.time_s == pytest.approx(25 * US + MiB / (algbw * GB) * 3 * 16 / 8)


def test_where_protocols_and_algorithms_apply() -> None:
    pcie = CollectiveModel(get_cluster("pcie-4090"))
    with pytest.raises(ValueError, match="LL128"):
        pcie.collective("all_reduce", 1e6, range(8), protocol="LL128")  # NVLink only
    p4de = CollectiveModel(get_cluster("aws-p4de", nodes=2))
    assert {p4de.collective("all_reduce", s, range(16)).protocol for s in (1e4, 1e6, 1e8)} == {"Simple"}
    with pytest.raises(ValueError, match="LL"):
        p4de.collective("all_reduce", 1e6, range(16), protocol="LL")  # EFAv1: Simple only
    assert CollectiveModel(get_cluster("aws-p5", nodes=2)).collective(
        "all_reduce", 4 * MiB, range(16)).protocol == "LL128"
    with pytest.raises(ValueError, match="nvls"):
        CollectiveModel(get_cluster("dgx-a100")).collective("all_reduce", 1e9, range(8), algorithm="nvls")
    h100 = CollectiveModel(get_cluster("dgx-h100", nodes=2))
    with pytest.raises(ValueError, match="nvls"):  # NVLS spans one node (CollNet aside)
        h100.collective("all_reduce", 1e9, range(16), algorithm="nvls")
    assert h100.collective("all_reduce", 1e9, range(16)).algorithm == "nvls_tree"
    with pytest.raises(ValueError, match="nvls_tree"):  # uneven members per node
        h100.collective("all_reduce", 1e9, [0, 1, 2, 8, 9], algorithm="nvls_tree")
    cpu = CollectiveModel(get_cluster("cpu-host"))
    assert cpu.collective("all_reduce", 1e6, [0, 1]).protocol == ""  # gloo: plain alpha-beta


def test_busbw_definition_holds_in_nccl_mode() -> None:
    model = CollectiveModel(get_cluster("dgx-h100", nodes=2))
    for op, factor in (("all_reduce", 2 * 15 / 16), ("all_gather", 15 / 16), ("broadcast", 1.0)):
        cost = model.collective(op, 3e8, range(16))
        assert cost.algbw_GBps == pytest.approx(3e8 / cost.time_s / GB)
        assert cost.busbw_GBps == pytest.approx(cost.algbw_GBps * factor)


def test_versions_registry_and_validation() -> None:
    assert get_nccl_tuning("2.18").ring_ll_factor == 1 / 4 and get_nccl_tuning("2.27").ring_ll_factor == 1 / 2
    assert get_nccl_tuning("2.27-aws").net_latency_us == 75.0
    with pytest.raises(ValueError, match="2.27"):
        get_nccl_tuning("1.0")
    with pytest.raises(ValueError, match="nccl_version"):
        get_cluster("dgx-h100").with_overrides({"nccl_version": "3.0"})
    with pytest.raises(ValueError, match="protocol"):
        CollectiveModel(get_cluster("dgx-h100")).collective("all_reduce", 1e6, range(8), protocol="ll")
