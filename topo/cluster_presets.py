"""Cluster presets and the registry lookup :func:`get_cluster`.

Components come from :mod:`topo.device_presets` and :mod:`topo.link_presets` (sources there).
Node-level facts (RECALLED unless tagged): DGX A100 (8 HDR compute NICs: Narayanan 2021, VERIFIED),
DGX H100/B200 (8 ConnectX-7 400G), HGX H200 (same as DGX H100), AWS p4d/p4de (4 x 100G EFA,
VERIFIED) and p5 (32 x 100G EFA, VERIFIED), GCP a3-highgpu-8g (4 x 200G GPUDirect-TCPX NICs),
an 8 x RTX 4090 workstation (PCIe Gen4, each GPU on its own root port, no P2P on GeForce, one
100G RoCE NIC), and a CPU-only host for the trainer's CPU runs (ROUGH, calibration fits it).

Fabrics: "dgx-*" are rail-optimized fat-trees (DGX SuperPOD: NIC i of every node of a 32-node
scalable unit on rail leaf i); "dgx-h100-superpod" adds the third tier of a large SuperPOD: four
scalable units per non-blocking spine group (a "pod" here), pods joined by a non-blocking core
(RECALLED from NVIDIA's DGX SuperPOD reference architecture; 128 nodes by default).
"llama3-h100-roce" is Meta's Llama 3 RoCE cluster (Llama 3 paper, sec. 3.3.1, VERIFIED via
glennklockwood.com's summary): 400 Gb/s per GPU, two 8-GPU servers per rack under one ToR,
192 racks (3,072 GPUs) per pod with full bisection bandwidth, eight pods (24,576 GPUs, the default
size) joined by an aggregation layer oversubscribed 1:7; ToR uplinks are modeled non-blocking
(Meta provisions them 2:1 *under*-subscribed). "hgx-h100-roce" is a generic 8 x 400G RoCE HGX
H100 cluster on a non-blocking fat-tree of 16-node leaves (RECALLED typical ToR radix). AWS p4d,
p4de and p5 run EFA; "pcie-4090" routes every GPU-GPU byte through the CPU root complex.
NVMe bandwidths are the Azure ND v4/v5 FIO figures (VERIFIED) used as proxies for similar hosts.
DRAM bandwidth = sockets x channels x DDR rate (RECALLED platform specs).

Prices (price_per_gpu_hour_usd): :data:`topo.prices.PRESET_PRICES`, each with its basis (on-demand
hyperscaler instance / 8, or GPU cloud per GPU), source and date.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.errors import unknown_name
from topo.cluster import ClusterSpec
from topo.device_presets import get_device
from topo.host import HostSpec
from topo.link_presets import get_link
from topo.prices import preset_price

GiB = 2**30
TB = 10**12

_DGX_A100_HOST = HostSpec(cpu_sockets=2, cpu_cores=128, dram_bytes=2048 * GiB, dram_GBps=409.6,
                          nvme_bytes=30 * TB, nvme_read_GBps=9.3, nvme_write_GBps=8.2)
_DGX_H100_HOST = HostSpec(cpu_sockets=2, cpu_cores=112, dram_bytes=2048 * GiB, dram_GBps=614.4,
                          nvme_bytes=30 * TB, nvme_read_GBps=55.3, nvme_write_GBps=33.9)
_DGX_B200_HOST = HostSpec(cpu_sockets=2, cpu_cores=112, dram_bytes=2048 * GiB, dram_GBps=716.8,
                          nvme_bytes=30 * TB, nvme_read_GBps=55.4, nvme_write_GBps=33.8)
_P4D_HOST = HostSpec(cpu_sockets=2, cpu_cores=48, dram_bytes=1152 * GiB, dram_GBps=281.6,
                     nvme_bytes=8 * TB, nvme_read_GBps=9.3, nvme_write_GBps=8.2)
_P5_HOST = HostSpec(cpu_sockets=2, cpu_cores=96, dram_bytes=2048 * GiB, dram_GBps=409.6,
                    nvme_bytes=30 * TB, nvme_read_GBps=55.3, nvme_write_GBps=33.9)
_A3_HOST = HostSpec(cpu_sockets=2, cpu_cores=104, dram_bytes=1872 * GiB, dram_GBps=614.4,
                    nvme_bytes=6 * TB, nvme_read_GBps=9.3, nvme_write_GBps=8.2)
_WORKSTATION_HOST = HostSpec(cpu_sockets=2, cpu_cores=128, dram_bytes=512 * GiB, dram_GBps=409.6,
                             nvme_bytes=4 * TB, nvme_read_GBps=7.0, nvme_write_GBps=6.0)
_CPU_HOST = HostSpec(cpu_sockets=1, cpu_cores=4, dram_bytes=16 * GiB, dram_GBps=20.0,
                     nvme_bytes=TB // 4, nvme_read_GBps=2.0, nvme_write_GBps=1.0)


def _nvswitch_box(name: str, device: str, nvlink: str, pcie: str, nic: str, nics: int,
                  fabric: str, nodes_per_leaf: int, host: HostSpec, **fabric_options: Any) -> ClusterSpec:
    """An 8-GPU NVSwitch server with 2 GPUs per PCIe switch, scaled out over a fabric (priced by
    :data:`topo.prices.PRESET_PRICES`)."""
    return ClusterSpec(name=name, device=get_device(device), gpus_per_node=8,
                       intra_node="nvswitch", nvlink=get_link(nvlink), pcie=get_link(pcie),
                       gpus_per_pcie_switch=2, nic=get_link(nic), nics_per_node=nics,
                       fabric=fabric, nodes_per_leaf=nodes_per_leaf, host=host,
                       socket_link=get_link("upi"), price_per_gpu_hour_usd=preset_price(name).usd_per_gpu_hour,
                       **fabric_options)


_PRESETS: dict[str, ClusterSpec] = {
    c.name: c
    for c in (
        # DGX SuperPODs are rail-optimized; scalable units of 20 (A100) / 32 (H100, B200) nodes.
        _nvswitch_box("dgx-a100", "a100-80gb", "nvlink3", "pcie-gen4", "ib-hdr", 8,
                      "rail-optimized", 20, _DGX_A100_HOST),
        _nvswitch_box("dgx-h100", "h100-sxm", "nvlink4", "pcie-gen5", "ib-ndr", 8,
                      "rail-optimized", 32, _DGX_H100_HOST),
        _nvswitch_box("hgx-h200", "h200", "nvlink4", "pcie-gen5", "ib-ndr", 8,
                      "rail-optimized", 32, _DGX_H100_HOST),
        _nvswitch_box("dgx-b200", "b200", "nvlink5", "pcie-gen5", "ib-ndr", 8,
                      "rail-optimized", 32, _DGX_B200_HOST),
        _nvswitch_box("dgx-h100-superpod", "h100-sxm", "nvlink4", "pcie-gen5", "ib-ndr", 8,
                      "rail-optimized", 32, _DGX_H100_HOST, nodes=128, leaf_blocks_per_pod=4),
        _nvswitch_box("llama3-h100-roce", "h100-sxm", "nvlink4", "pcie-gen5", "roce-400g", 8,
                      "fat-tree", 2, _DGX_H100_HOST, nodes=3072, leaf_blocks_per_pod=192,
                      pod_oversubscription=7.0),
        _nvswitch_box("hgx-h100-roce", "h100-sxm", "nvlink4", "pcie-gen5", "roce-400g", 8,
                      "fat-tree", 16, _DGX_H100_HOST),
        # AWS/GCP: non-blocking Clos fabrics (modeled as fat-trees of 16-node leaves, RECALLED).
        _nvswitch_box("aws-p4d", "a100-40gb", "nvlink3", "pcie-gen4", "efa-100g", 4,
                      "fat-tree", 16, _P4D_HOST, nccl_version="2.27-aws"),
        _nvswitch_box("aws-p4de", "a100-80gb", "nvlink3", "pcie-gen4", "efa-100g", 4,
                      "fat-tree", 16, _P4D_HOST, nccl_version="2.27-aws"),
        _nvswitch_box("aws-p5", "h100-sxm", "nvlink4", "pcie-gen5", "efa2-100g", 32,
                      "fat-tree", 16, _P5_HOST, nccl_version="2.27-aws"),
        _nvswitch_box("gcp-a3", "h100-sxm", "nvlink4", "pcie-gen5", "tcpx-200g", 4,
                      "fat-tree", 16, _A3_HOST),
        ClusterSpec(name="pcie-4090", device=get_device("rtx-4090"), gpus_per_node=8,
                    intra_node="pcie", pcie=get_link("pcie-gen4"), gpus_per_pcie_switch=1,
                    pcie_p2p=False, nic=get_link("roce-100g"), nics_per_node=1,
                    fabric="fat-tree", nodes_per_leaf=16, host=_WORKSTATION_HOST,
                    socket_link=get_link("upi"), price_per_gpu_hour_usd=preset_price("pcie-4090").usd_per_gpu_hour),
        ClusterSpec(name="cpu-host", device=get_device("cpu-host"), gpus_per_node=2,
                    intra_node="host", pcie=get_link("host-shm"), gpus_per_pcie_switch=1,
                    fabric="single-node", host=_CPU_HOST, socket_link=get_link("upi"),
                    price_per_gpu_hour_usd=preset_price("cpu-host").usd_per_gpu_hour),
    )
}


def cluster_presets() -> dict[str, ClusterSpec]:
    """All cluster presets by name (a copy; safe to mutate)."""
    return dict(_PRESETS)


def get_cluster(name: str, *, nodes: int | None = None, gpus_per_node: int | None = None,
                price_per_gpu_hour_usd: float | None = None) -> ClusterSpec:
    """A cluster preset, optionally resized or repriced (validated again).

    Raises:
        UnknownNameError: ``name`` is not a preset (the message lists the valid names).
        ValueError: a bad size or price (e.g. nodes > 1 on a single-node preset).
    """
    try:
        spec = _PRESETS[name]
    except KeyError:
        raise unknown_name("cluster", name, _PRESETS) from None
    changes: dict[str, object] = {}
    if nodes is not None:
        changes["nodes"] = nodes
    if gpus_per_node is not None:
        changes["gpus_per_node"] = gpus_per_node
    if price_per_gpu_hour_usd is not None:
        changes["price_per_gpu_hour_usd"] = price_per_gpu_hour_usd
    return replace(spec, **changes) if changes else spec  # type: ignore[arg-type]
