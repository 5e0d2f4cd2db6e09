"""What NCCL's cost model sees of a group of devices: :func:`group_layout`.

Channels follow NCCL's topology search (src/graph/search.cc): inside an NVSwitch node about one
ring per NVLink (A100: 12 x 20 GB/s, NCCL's logs "nChannels 12, bw 20"), capped at
``max_graph_channels``; a PCIe box gets 2 (two channels at PCI speed saturate its link);
across nodes one channel per NIC port the group's GPUs use on a node. connect.cc then doubles
them (:attr:`topo.nccl_model.Layout.channels`).
"""

from __future__ import annotations

import numpy as np

from core.arrays import sorted_unique
from topo.cluster import ClusterSpec
from topo.nccl_model import Layout
from topo.nccl_tuning import ARCHS, NcclTuning
from topo.routing import Router

PCIE_GRAPH_CHANNELS = 2


def group_layout(cluster: ClusterSpec, router: Router, tuning: NcclTuning, group: np.ndarray) -> Layout | None:
    """The NCCL layout of ``group`` (sorted global device ids), or None outside NCCL's model
    (CPU processes, or a device without a CUDA compute capability)."""
    arch = cluster.device.nccl_arch
    if arch is None or cluster.intra_node == "host":
        return None
    node = router.node_arr[group]
    nodes, counts = np.unique(node, return_counts=True)
    per_node = int(counts.max())
    uniform = bool(counts.min() == counts.max())
    hw = "nvlink" if cluster.intra_node == "nvswitch" else "pci"
    return Layout(ranks=len(group), nodes=len(nodes), per_node=per_node, uniform=uniform, hw=hw,
                  arch=arch, net_latency_s=_route_latency(router, group, node),
                  nccl_net_latency_s=tuning.net_latency_us * 1e-6 if len(nodes) > 1 else 0.0,
                  graph_channels=_graph_channels(cluster, router, tuning, group, node, len(nodes)),
                  nvls_channels=_nvls_channels(cluster, tuning, arch, per_node, uniform),
                  net_ll=cluster.nic is None or cluster.nic.ll_protocols)


def _route_latency(router: Router, group: np.ndarray, node: np.ndarray) -> float:
    """The slowest route between consecutive nodes' first members (NICs, fabric hops), seconds;
    0 on one node."""
    first = group[np.unique(node, return_index=True)[1]]
    if len(first) < 2:
        return 0.0
    return float(router.latencies(first, np.roll(first, -1)).max())


def _graph_channels(cluster: ClusterSpec, router: Router, tuning: NcclTuning, group: np.ndarray,
                    node: np.ndarray, nodes: int) -> int:
    """Channels of NCCL's topology search for this group (see the module docstring)."""
    cap = tuning.max_graph_channels
    if nodes == 1:
        if cluster.intra_node == "nvswitch" and cluster.nvlink is not None:
            return min(cluster.nvlink.links, cap)
        return PCIE_GRAPH_CHANNELS
    nic = router.nic_arr[group]
    per_node = max(sorted_unique(nic[node == n]).size for n in sorted_unique(node).tolist())
    return max(1, min(per_node * cluster.ports_per_graph_nic, cap))


def _nvls_channels(cluster: ClusterSpec, tuning: NcclTuning, arch: str, per_node: int, uniform: bool) -> int:
    """NCCL's NVLS channel count, 0 where NVLS cannot run (no NVLink SHARP, uneven groups)."""
    nvlink = cluster.nvlink
    if nvlink is None or nvlink.nvls_efficiency <= 0.0 or not uniform or per_node < 2:
        return 0
    return tuning.nvls_channels[ARCHS.index(arch)]
