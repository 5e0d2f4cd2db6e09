"""Copies between a GPU and its node's memory tiers (CPU DRAM, NVMe) over PCIe.

A copy runs at the slowest of: the GPU's PCIe link (x efficiency), its PCIe switch's uplink shared
by the GPUs copying under that switch, and the tier's bandwidth shared by all GPUs of the node
copying at once (``gpus_copying``, e.g. 8 under ZeRO-Offload). NVMe traffic also crosses DRAM
(bounce buffers), which is not modeled. Units: bytes, seconds, GB/s.
"""

from __future__ import annotations

from core.errors import invalid, require_choice, require_positive_int
from topo.cluster import ClusterSpec

TIERS = ("dram", "nvme")
DIRECTIONS = ("to_host", "to_device")


def host_copy_GBps(cluster: ClusterSpec, tier: str, direction: str, gpus_copying: int = 1) -> float:
    """Per-GPU bandwidth (GB/s) of a copy between a GPU and ``tier``."""
    require_choice("tier", tier, TIERS)
    require_choice("direction", direction, DIRECTIONS)
    require_positive_int("gpus_copying", gpus_copying)
    if gpus_copying > cluster.gpus_per_node:
        raise invalid("gpus_copying", gpus_copying, f"at most gpus_per_node={cluster.gpus_per_node}")
    host = cluster.host
    if tier == "dram":
        tier_GBps = host.dram_GBps
    else:
        tier_GBps = host.nvme_write_GBps if direction == "to_host" else host.nvme_read_GBps
        if host.nvme_bytes == 0 or tier_GBps <= 0:
            raise invalid("tier", tier, f"cluster {cluster.name!r} has no local NVMe")
    pcie = cluster.pcie.effective_GBps
    if cluster.intra_node == "host":
        return tier_GBps / gpus_copying
    per_switch = min(gpus_copying, cluster.gpus_per_pcie_switch)
    return min(pcie, pcie / per_switch, tier_GBps / gpus_copying)


def host_copy_time_s(cluster: ClusterSpec, size_bytes: float, tier: str = "dram",
                     direction: str = "to_host", gpus_copying: int = 1) -> float:
    """Seconds to copy ``size_bytes`` between one GPU and ``tier`` (see :func:`host_copy_GBps`)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int | float) or not size_bytes >= 0:
        raise invalid("size_bytes", size_bytes, "expected a number >= 0")
    return size_bytes / (host_copy_GBps(cluster, tier, direction, gpus_copying) * 1e9)
