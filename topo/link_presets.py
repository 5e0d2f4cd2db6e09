"""Link presets, from component facts only (never fit to end-to-end step times).

Sources (see /work/shared/hardware-facts.md sections 1 and 2.2):
- NVLink line rates per GPU per direction: NVLink3 300 GB/s (12 links), NVLink4 450 (18 links),
  NVLink5 900 (18 links) (stas00/ml-engineering network/README.md).
- NVLink efficiency: NVIDIA maintainer (NVIDIA/nccl-tests #212): "450GB/s is the line rate. With
  the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" -> 370/450,
  used for NVLink3 too (same NCCL protocols). NVLink5: the GB200 4-GPU ring busbw at 8 GB,
  679.61 of 900 (Azure/AI-benchmarking-guide ND GB200 v6), the only NVLink5 NCCL figure we have.
- NVLS (NVLink SHARP, NVSwitch gen3+): same maintainer: 8 H100 reach "peak busBw of ~480GB/s
  (algbw ~275GB/s)". Each GPU moves S*(n+1)/n bytes each way (see topo/algorithms.py), so the
  achievable fraction is 275*(9/8)/450. NVLink3 (A100) has no NVLS; NVLink5 proxies NVLink4.
- PCIe x16 line rates: Gen4 31.5, Gen5 63 GB/s per direction (ml-engineering); efficiency from
  nvbandwidth host->device copies: 26.28 of 31.5 (ND A100 v4), 51 of 63 (ND H100 v5).
- InfiniBand 4x: HDR 200, NDR 400, XDR 800 Gb/s. NDR: "46-48GB/s per NIC" (NVIDIA/nccl-tests #290)
  -> 47/50. HDR: 2 x 8 A100 with 4 HDR NICs per node reach all_reduce 86 of 100 GB/s
  (nccl-tests #175) -> 0.86. XDR: NDR's fraction as a proxy.
- AWS EFA device 100 Gb/s (p4d/p4de: 4 per node; p5: 32 per node); "effective 340 Gbps for
  all_reduce tests" of p4d's 400 (ml-engineering) -> 0.85, also the proxy for p5's EFAv2.
- RoCE: no trustworthy component figure (a community 2 x 8 H100 RoCE run got half of what the
  reporter expected, NVIDIA/nccl #2409); NDR's fraction as a proxy. GCP A3 GPUDirect-TCPX 200G:
  EFA's fraction as a proxy.
- Latencies are per graph edge, RECALLED orders of magnitude (calibration fits them): NVLink and
  PCIe 0.5 us (a GPU-GPU hop through a switch is 2 edges, ~1 us); InfiniBand/RoCE 1 us; socket
  link 0.2 us. EFA: 13 us per edge, so that the modeled 8 B all_reduce on 2 x p5 (11 us NCCL call
  overhead + NVLS 2 us + a 28 us inter-node round of 2 EFA edges and 4 PCIe edges each way) is the
  measured 65-75 us (aws-samples awsome-distributed-training); 2 x p4de measured 161 us at 8 B,
  which this model underestimates (about 81 us).
- UPI/xGMI socket link ~60 GB/s per direction and host shared memory are ROUGH figures.
"""

from __future__ import annotations

from topo.errors import unknown_name
from topo.link import LinkSpec

_NVLINK_EFF = 370 / 450
_NVLS_EFF = 275 * (9 / 8) / 450
_NDR_EFF = 47 / 50
_EFA_EFF = 340 / 400

_PRESETS: dict[str, LinkSpec] = {
    link.name: link
    for link in (
        LinkSpec(name="nvlink3", kind="nvlink", bandwidth_GBps=300.0, latency_s=0.5e-6,
                 efficiency=_NVLINK_EFF),
        LinkSpec(name="nvlink4", kind="nvlink", bandwidth_GBps=450.0, latency_s=0.5e-6,
                 efficiency=_NVLINK_EFF, nvls_efficiency=_NVLS_EFF),
        LinkSpec(name="nvlink5", kind="nvlink", bandwidth_GBps=900.0, latency_s=0.5e-6,
                 efficiency=679.61 / 900, nvls_efficiency=_NVLS_EFF),
        LinkSpec(name="pcie-gen4", kind="pcie", bandwidth_GBps=31.5, latency_s=0.5e-6,
                 efficiency=26.28 / 31.5),
        LinkSpec(name="pcie-gen5", kind="pcie", bandwidth_GBps=63.0, latency_s=0.5e-6,
                 efficiency=51 / 63),
        LinkSpec(name="ib-hdr", kind="infiniband", bandwidth_GBps=25.0, latency_s=1e-6,
                 efficiency=86 / 100),
        LinkSpec(name="ib-ndr", kind="infiniband", bandwidth_GBps=50.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="ib-xdr", kind="infiniband", bandwidth_GBps=100.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="efa-100g", kind="efa", bandwidth_GBps=12.5, latency_s=13e-6,
                 efficiency=_EFA_EFF),
        LinkSpec(name="roce-100g", kind="ethernet", bandwidth_GBps=12.5, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="roce-200g", kind="ethernet", bandwidth_GBps=25.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="roce-400g", kind="ethernet", bandwidth_GBps=50.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="tcpx-200g", kind="ethernet", bandwidth_GBps=25.0, latency_s=4e-6,
                 efficiency=_EFA_EFF),
        LinkSpec(name="upi", kind="cpu", bandwidth_GBps=60.0, latency_s=0.2e-6, efficiency=0.8),
        # ROUGH: one CPU process to another through host memory (gloo over loopback).
        LinkSpec(name="host-shm", kind="shm", bandwidth_GBps=5.0, latency_s=10e-6, efficiency=0.5),
    )
}


def link_presets() -> dict[str, LinkSpec]:
    """All link presets by name (a copy; safe to mutate)."""
    return dict(_PRESETS)


def get_link(name: str) -> LinkSpec:
    """Look a link preset up by name; the error lists the valid names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("link", name, _PRESETS) from None
