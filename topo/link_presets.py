"""Link presets, from component facts only (never fit to end-to-end step times).

Sources (see ../shared/hardware-facts.md beside the repository, sections 1 and 2.2):
- NVLink line rates per GPU per direction: NVLink3 300 GB/s (12 links), NVLink4 450 (18 links),
  NVLink5 900 (18 links) (stas00/ml-engineering network/README.md).
- NVLink efficiency: NCCL's own per-link NVLink bandwidth (src/graph/topo.h: SM80_NVLINK_BW 20,
  SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s per link) over the per-link line rate (25 GB/s
  for NVLink3/4, 50 for NVLink5): 0.80, 0.824, 0.802. It agrees with the NVIDIA maintainer's
  "450GB/s is the line rate ... NCCL can get an effective NVLink bandwidth of 370GB/s"
  (NVIDIA/nccl-tests #212): 18 x 20.6 = 370.8. ``links`` is the NVLink count per GPU (12 / 18 / 18).
- NVLS (NVLink SHARP, NVSwitch gen3+): NCCL's nvlsEfficiency (src/graph/tuning.cc, 2.27: Hopper
  0.85, Blackwell 0.74) times the NVLink efficiency above, as a fraction of line rate. A GPU moves
  S*(n+1)/n bytes each way (topo/algorithms.py), so 8 H100 reach 450*0.824*0.85*8/9*14/8 = 490 GB/s
  busbw; the maintainer quotes "~480GB/s". NVLink3 (A100) has no NVLS.
- PCIe x16 line rates: Gen4 31.5, Gen5 63 GB/s per direction (ml-engineering); efficiency from
  nvbandwidth host->device copies: 26.28 of 31.5 (ND A100 v4), 51 of 63 (ND H100 v5), both
  directions. Those figures are nvbandwidth's SM-driven copies (``host_to_device_memcpy_sm``,
  Azure AI-benchmarking-guide Benchmarks/NVBandwidth.py), a proxy for the copy engine that
  PyTorch's copies use; the same guide's device->host SM copy on ND A100 v4 (6.27 GB/s, 52 on
  ND H100 v5) measures SM writes into host memory, not a copy engine's, and is not used.
- InfiniBand 4x: HDR 200, NDR 400, XDR 800 Gb/s. NDR: "46-48GB/s per NIC" (NVIDIA/nccl-tests #290)
  -> 47/50. HDR: 24 GB/s per NIC -> 24/25: "On an Nvidia DGX-A100 system we have 8x200Gbit/s IB
  cards and we measure 192GB/s AllReduce BusBW" (AddyLaddy, NVIDIA/nccl #812); "you should get ...
  24GB/s inter-node" per HDR NIC (sjeaugey, NVIDIA/nccl #412); one HDR NIC of 2 x 8 A100 "reach[es]
  the theoretical value(24GB/s)" while the same nodes' 4 NICs give 86 of 96 (NVIDIA/nccl #1048 =
  nccl-tests #175, the reporter's unresolved shortfall, so not the NIC's rate). XDR: NDR's fraction
  as a proxy.
- AWS EFA device 100 Gb/s (p4d/p4de: 4 per node, EFAv1 "efa-100g"; p5: 32 per node, EFAv2
  "efa2-100g"); "effective 340 Gbps for all_reduce tests" of p4d's 400 (ml-engineering) -> 0.85,
  also the proxy for p5's EFAv2. ``ll_protocols``: aws-ofi-nccl forces NCCL_PROTO=simple when the
  EFA endpoint cannot deliver 128-byte-aligned writes in order (src/platform-aws.cpp); p4d/p4de
  use its send/recv path (no RDMA write, EFAv1) and are modeled Simple-only (INFERRED from that
  rule), while its p5 tuner regions pick tree LL128 (src/tuner/nccl_ofi_regions.cpp), so EFAv2
  keeps LL/LL128.
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

from core.errors import unknown_name
from topo.link import LinkSpec

_NVLINK3_EFF = 20.0 / 25.0
_NVLINK4_EFF = 20.6 / 25.0
_NVLINK5_EFF = 40.1 / 50.0
_NVLS_HOPPER, _NVLS_BLACKWELL = 0.85, 0.74
_NDR_EFF = 47 / 50
_EFA_EFF = 340 / 400

_PRESETS: dict[str, LinkSpec] = {
    link.name: link
    for link in (
        LinkSpec(name="nvlink3", kind="nvlink", bandwidth_GBps=300.0, latency_s=0.5e-6,
                 efficiency=_NVLINK3_EFF, links=12),
        LinkSpec(name="nvlink4", kind="nvlink", bandwidth_GBps=450.0, latency_s=0.5e-6,
                 efficiency=_NVLINK4_EFF, nvls_efficiency=_NVLINK4_EFF * _NVLS_HOPPER, links=18),
        LinkSpec(name="nvlink5", kind="nvlink", bandwidth_GBps=900.0, latency_s=0.5e-6,
                 efficiency=_NVLINK5_EFF, nvls_efficiency=_NVLINK5_EFF * _NVLS_BLACKWELL, links=18),
        LinkSpec(name="pcie-gen4", kind="pcie", bandwidth_GBps=31.5, latency_s=0.5e-6,
                 efficiency=26.28 / 31.5),
        LinkSpec(name="pcie-gen5", kind="pcie", bandwidth_GBps=63.0, latency_s=0.5e-6,
                 efficiency=51 / 63),
        LinkSpec(name="ib-hdr", kind="infiniband", bandwidth_GBps=25.0, latency_s=1e-6,
                 efficiency=24 / 25),
        LinkSpec(name="ib-ndr", kind="infiniband", bandwidth_GBps=50.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="ib-xdr", kind="infiniband", bandwidth_GBps=100.0, latency_s=1e-6,
                 efficiency=_NDR_EFF),
        LinkSpec(name="efa-100g", kind="efa", bandwidth_GBps=12.5, latency_s=13e-6,
                 efficiency=_EFA_EFF, ll_protocols=False),
        LinkSpec(name="efa2-100g", kind="efa", bandwidth_GBps=12.5, latency_s=13e-6,
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
