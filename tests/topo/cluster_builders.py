"""Shared builders for topo tests: small clusters whose link numbers are chosen by the test.

A module of its own (not conftest.py): test files import it by name, and two conftest modules
(tests/topo, tests/profiler) would shadow each other when both directories are collected.
"""

from __future__ import annotations

from topo import ClusterSpec, HostSpec, LinkSpec, get_device

GiB = 2**30


def link(name: str, kind: str, bw: float, lat: float, eff: float = 1.0, nvls: float = 0.0) -> LinkSpec:
    """A link with round numbers (GB/s per direction, seconds per edge)."""
    return LinkSpec(name=name, kind=kind, bandwidth_GBps=bw, latency_s=lat, efficiency=eff,
                    nvls_efficiency=nvls)


OVERHEAD_S = 3e-6  # collective_overhead_s of the test clusters' devices
# compute_capability 0: no NCCL protocols, the plain alpha-beta model (closed forms below)
ANALYTIC = {"collective_overhead_s": OVERHEAD_S, "compute_capability": 0}
HOST = HostSpec(cpu_sockets=1, cpu_cores=8, dram_bytes=64 * GiB, dram_GBps=100.0,
                nvme_bytes=10**12, nvme_read_GBps=5.0, nvme_write_GBps=2.5)
UPI = link("upi-test", "cpu", 100.0, 1e-7)


def nic_ring_cluster(nodes: int, *, nic_bw: float = 10.0, nic_eff: float = 0.5,
                     nic_lat: float = 2e-6, pcie_bw: float = 100.0, pcie_lat: float = 5e-7) -> ClusterSpec:
    """``nodes`` single-GPU nodes on one leaf: every ring hop is GPU-PCIe-NIC-leaf-NIC-PCIe-GPU."""
    device = get_device("a100-80gb").with_overrides(ANALYTIC)
    return ClusterSpec(name="ring-test", device=device, nodes=nodes,
                       gpus_per_node=1, intra_node="pcie",
                       pcie=link("pcie-test", "pcie", pcie_bw, pcie_lat),
                       gpus_per_pcie_switch=1, nic=link("nic-test", "infiniband", nic_bw, nic_lat, nic_eff),
                       nics_per_node=1, fabric="fat-tree", nodes_per_leaf=nodes, host=HOST,
                       socket_link=UPI)


def nvswitch_cluster(gpus: int, *, bw: float = 100.0, eff: float = 0.8, lat: float = 1e-6,
                     nvls: float = 0.0) -> ClusterSpec:
    """One node of ``gpus`` GPUs on an NVSwitch."""
    device = get_device("h100-sxm").with_overrides(ANALYTIC)
    return ClusterSpec(name="nvs-test", device=device, nodes=1, gpus_per_node=gpus,
                       intra_node="nvswitch", nvlink=link("nvl-test", "nvlink", bw, lat, eff, nvls),
                       pcie=link("pcie-test", "pcie", 50.0, 5e-7), gpus_per_pcie_switch=1,
                       fabric="single-node", host=HOST, socket_link=UPI)
