"""The cluster of a published run: its GPU type and count on a cluster preset, its network if stated.

GPU family -> the preset of its standard 8-GPU NVSwitch server (``topo.cluster_presets``); the
row's memory picks the device variant (A100 40/80 GB) or sets the HBM size; an H100 stated as
HBM2e runs on ``h100-sxm-hbm2e`` (2.4 TB/s, lower-TDP peak: an approximation, noted). A stated
network replaces the preset's NICs: "N Gb/s per GPU" gives one N Gb/s NIC per GPU; "N links per
node" of a named technology gives N NICs at its line rate; "N Gbps node-node/inter-node" (a node
total) is split over the most NICs (8, 4, 2, 1) whose rate is a preset link's. The link kind is
the stated one (InfiniBand or RoCE/Ethernet), else the preset's; without a preset link of that
kind and rate, the other kind's (noted). Unstated networks keep the preset's (noted).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from profiler.validate.published.notes import Note, Unexpressible
from profiler.validate.published.rows import PublishedRow
from topo import ClusterSpec, get_cluster
from topo.device import DeviceSpec
from topo.device_presets import get_device
from topo.link import LinkSpec
from topo.link_presets import link_presets

GIB = 2**30
# GPU family (as it appears in the row's ``gpu`` text) -> its 8-GPU server preset.
SERVER_PRESETS = {"a100": "dgx-a100", "h100": "dgx-h100", "h200": "hgx-h200", "b200": "dgx-b200"}
A100_BY_MEMORY = {40: "a100-40gb", 80: "a100-80gb"}
H100_HBM2E = "h100-sxm-hbm2e"  # an H100 the row says has HBM2e (lower-TDP SXM part)
# Line rates of fabric technologies named without a rate (Gb/s per port; vendor specifications:
# Intel Omni-Path 100 Series, InfiniBand EDR/HDR/NDR).
LINE_RATES_GBPS = {"omni-path": 100, "opa": 100, "edr": 100, "hdr": 200, "ndr": 400}
LINK_KINDS = {"infiniband": "ib-", "ethernet": "roce-"}
_IB_WORDS = ("infiniband", "hdr", "ndr", "edr")
_ETH_WORDS = ("roce", "ethernet")


def cluster_for(row: PublishedRow) -> tuple[ClusterSpec, list[Note], list[Note]]:
    """(cluster, assumptions, approximations) of ``row``; Unexpressible for an unknown GPU."""
    family = next((f for f in SERVER_PRESETS if f in row.gpu.lower()), None)
    if family is None:
        raise Unexpressible(f"GPU {row.gpu!r}: no cluster preset (known: {', '.join(SERVER_PRESETS)})")
    if row.gpus % 8:
        raise Unexpressible(f"{row.gpus} GPUs is not a whole number of 8-GPU servers")
    base = get_cluster(SERVER_PRESETS[family], nodes=row.gpus // 8)
    assumed: list[Note] = []
    approx: list[Note] = []
    cluster = dataclasses.replace(base, device=_device(row, family, base, assumed, approx))
    return _with_network(row, cluster, assumed, approx), assumed, approx


def _device(row: PublishedRow, family: str, base: ClusterSpec, assumed: list[Note],
            approx: list[Note]) -> DeviceSpec:
    """The device of the row's GPU memory (the preset's when unstated)."""
    memory = row.gpu_memory_gb
    if memory is None:
        gib = base.device.hbm_bytes / GIB
        assumed.append(Note("gpu-memory", f"GPU memory not stated: {base.device.name} ({gib:g} GiB)"))
        return base.device
    if family == "a100":
        if int(memory) not in A100_BY_MEMORY:
            raise Unexpressible(f"A100 with {memory:g} GB: no device preset (40 or 80 GB)")
        return get_device(A100_BY_MEMORY[int(memory)])
    if family == "h100" and "hbm2e" in row.gpu.lower():
        device = get_device(H100_HBM2E)
        if memory * GIB != device.hbm_bytes:
            device = device.with_overrides({"hbm_bytes": int(memory * GIB)})
        approx.append(Note("gpu-variant", f"{row.gpu}: {H100_HBM2E} (HBM2e at 2.4 TB/s, compute peak midway "
                                          "between H100 NVL and SXM; see topo.device_presets)"))
        return device
    if memory * GIB == base.device.hbm_bytes:
        return base.device
    approx.append(Note("gpu-variant", f"{row.gpu}: {base.device.name} with {memory:g} GiB HBM "
                                      "(its compute peak and HBM bandwidth)"))
    return base.device.with_overrides({"hbm_bytes": int(memory * GIB)})


def _with_network(row: PublishedRow, cluster: ClusterSpec, assumed: list[Note], approx: list[Note]) -> ClusterSpec:
    text = (row.network or "").lower()
    if not text or text.startswith("not stated"):
        assumed.append(Note("network", f"network not stated: {cluster.name}'s {cluster.nics_per_node} x "
                                       f"{cluster.nic.name if cluster.nic else 'none'}"))
        return cluster
    kind = _stated_kind(text)
    if kind is None:
        kind = "infiniband" if cluster.nic is not None and cluster.nic.kind == "infiniband" else "ethernet"
        assumed.append(Note("nic-kind", f"network {row.network!r}: link kind not stated ({kind})"))
    nics = _nics(text, cluster.gpus_per_node)
    other = "ethernet" if kind == "infiniband" else "infiniband"
    choice = _choose(nics, kind) or _choose(nics, other)
    if choice is None:
        raise Unexpressible(f"network {row.network!r}: no link preset at its rate")
    count, link = choice
    if link.kind != kind:
        approx.append(Note("nic-link", f"network {row.network!r}: no {kind} preset at "
                                       f"{link.bandwidth_GBps * 8:g} Gb/s, modelled as {link.name}"))
    if nics.count is None:
        assumed.append(Note("nic-count", f"network {row.network!r}: {count} x {link.name} per node"))
    return dataclasses.replace(cluster, nic=link, nics_per_node=count)


@dataclass(frozen=True)
class Nics:
    """What a network text states: NICs per node and Gb/s each, or only the node's total."""

    count: int | None
    gbps: float


def _nics(text: str, gpus_per_node: int) -> Nics:
    """NICs per node and their rate ("per GPU", "N links per node"), or the node total."""
    rate = re.search(r"(\d+(?:\.\d+)?)\s*(?:gb/s|gbps)", text)
    links = re.search(r"(\d+)\s[^;]*?links? per node", text)
    if rate and "per gpu" in text:
        return Nics(gpus_per_node, float(rate.group(1)))
    if links:
        return Nics(int(links.group(1)), float(rate.group(1)) if rate else _named_rate(text))
    if rate:
        return Nics(None, float(rate.group(1)))
    raise Unexpressible(f"network {text!r}: no rate (Gb/s) stated")


def _choose(nics: Nics, kind: str) -> tuple[int, LinkSpec] | None:
    """(NICs per node, link) of ``kind`` for the stated NICs; a node total is split over the
    most NICs (8, 4, 2, 1) whose rate is a preset's."""
    if nics.count is not None:
        link = _link(kind, nics.gbps)
        return (nics.count, link) if link else None
    for count in (8, 4, 2, 1):
        link = _link(kind, nics.gbps / count)
        if link:
            return count, link
    return None


def _named_rate(text: str) -> float:
    """The line rate of the technology the text names (Omni-Path, EDR, HDR, NDR)."""
    for word, gbps in LINE_RATES_GBPS.items():
        if word in text:
            return float(gbps)
    raise Unexpressible(f"network {text!r}: neither a rate nor a known link technology")


def _stated_kind(text: str) -> str | None:
    if any(w in text for w in _ETH_WORDS):
        return "ethernet"
    if any(w in text for w in _IB_WORDS):
        return "infiniband"
    return None


def _link(kind: str, gbps: float) -> LinkSpec | None:
    """The RDMA link preset of ``kind`` ("infiniband": ib-*, "ethernet": roce-*) at ``gbps``."""
    prefix = LINK_KINDS[kind]
    return next((link for name, link in sorted(link_presets().items())
                 if name.startswith(prefix) and abs(link.bandwidth_GBps * 8 - gbps) < 1e-6), None)
