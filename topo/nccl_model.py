"""NCCL's algorithm x protocol cost model on top of the link-load bandwidth of :mod:`topo.algorithms`.

For one group layout and one (algorithm, protocol) a :class:`Candidate` holds the size-free parts:

    latency   = NCCL's tuner latency (base + per-step hardware latency by link class + the
                network's latency per inter-node step), x the ring plateau factor for
                multi-node ring Simple all-reduce; the network latency is the routes' own for
                the prediction and the plugin-reported one NCCL sees for its estimate,
    algbw     = the link-limited algorithm bandwidth (the busiest link of the group's traffic,
                concurrent groups included) x NCCL's protocol share, capped by NCCL's per-channel
                and LL ceilings, x the share of channels NCCL uses for the size,

and prices a size S two ways:

    estimate(S) = latency + S / (algbw' x tree correction)       NCCL's own tuner estimate, used
                                                                 to *select* (algbw': all channels,
                                                                 the group alone on the links
                                                                 NCCL's topology knows)
    time(S)     = latency + S / algbw x pipeline(S)              the prediction

``pipeline(S)`` is the Simple protocol's chunk pipeline fill: a collective is cut into chunks
(NCCL's chunk size rules) that are stored and forwarded whole through ``d`` stages; with c chunks
per channel the bandwidth term stretches by (c + d - 1) / c. Trees across nodes: d - 1 = the
inter-node hops up and down the tree, 2 log2(nodes) (the NVLink chain hops inside a node are far
shorter than the bottleneck's); on one node d - 1 = NCCL's tree depth (ranks - 1). NVLS: the
three warp groups of its kernel (scatter, reduce+multicast, gather), and fewer channels than
NCCL's NVLS channel count carry data when S < channels x heads x chunk. NVLS tree: NVLS stages
plus the inter-node tree's up and down hops. Inside a node LL and LL128 forward every 8- or
128-byte line as it lands (their flags travel with the data), so they fill no pipeline; across
nodes NCCL's network proxy sends whole FIFO steps, so LL/LL128 trees pipeline their chunks too
(NCCL shrinks LL128 tree chunks against a depth of 1 + log2 nodes + ppn/10 for this reason).
Rings pass every link's share of every chunk at each step, so their ramp is their latency alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.vocab import Collective
from topo.collective_ops import bus_factor
from topo.nccl_tuning import NcclTuning
from topo.nccl_window import window_stretch

NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    Collective.ALL_REDUCE: ("ring", "tree", "nvls", "nvls_tree"),
    Collective.ALL_GATHER: ("ring",),
    Collective.REDUCE_SCATTER: ("ring",),
    Collective.BROADCAST: ("ring",),
}
PROTOCOLS = ("LL", "LL128", "Simple")
SINGLE_PROTOCOL = ("nvls", "nvls_tree")


@dataclass(frozen=True)
class Layout:
    """What NCCL's model needs to know about a group.

    Attributes:
        ranks: group size.  nodes: nodes it spans.  per_node: most members on one node.
        uniform: the same number of members on every node.
        hw: link class inside a node, "nvlink" or "pci".
        arch: NCCL GPU generation (topo.nccl_tuning.ARCHS).
        net_latency_s: latency of the slowest cross-node route between node representatives, s.
        nccl_net_latency_s: the network latency NCCL's tuner sees (the net plugin's reported NIC
            latency), s.
        graph_channels: channels of NCCL's topology search (before connect.cc doubles them).
        nvls_channels: channels of NVLS algorithms (0 = no NVLS on this hardware).
        net_ll: NCCL may run LL/LL128 across the group's NICs (topo.link.LinkSpec.ll_protocols).
    """

    ranks: int
    nodes: int
    per_node: int
    uniform: bool
    hw: str
    arch: str
    net_latency_s: float
    nccl_net_latency_s: float
    graph_channels: int
    nvls_channels: int
    net_ll: bool = True

    @property
    def channels(self) -> int:
        """Channels a ring or tree collective runs on (connect.cc duplicates the graph's)."""
        return 2 * self.graph_channels

    @property
    def tree_depth(self) -> int:
        """NCCL's tree depth: ranks per node - 1 + log2(nodes) (src/graph/connect.cc)."""
        return self.per_node - 1 + _log2i(self.nodes)


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) on one layout: size-free parts of its cost (see module doc)."""

    algorithm: str
    protocol: str
    latency_s: float
    nccl_latency_s: float
    plateau: bool
    algbw_GBps: float
    nccl_algbw_GBps: float
    tuning: NcclTuning
    layout: Layout
    op: str

    def estimate(self, size: float) -> float:
        """NCCL's own tuner estimate of the time, seconds (used to select; like NCCL it assumes
        every channel, and trims channels for small sizes only after choosing)."""
        bw = self.nccl_algbw_GBps
        if self.algorithm == "tree" and self.op == Collective.ALL_REDUCE:
            bw *= self.tuning.correction(self.protocol, size)
        return self.nccl_latency_s * self._plateau(size) + size / (bw * 1e9)

    def time(self, size: float) -> float:
        """Predicted time, seconds (NCCL's base latency is the call's fixed cost; a multi-node
        Simple ring's bandwidth term is stretched by its network FIFO window, topo.nccl_window)."""
        bandwidth_s = size / (self._bandwidth(size) * 1e9) * self._pipeline(size)
        bandwidth_s *= window_stretch(self, size, bandwidth_s, self.channels(size))
        return self.latency_s * self._plateau(size) + bandwidth_s

    def channels(self, size: float) -> int:
        """Channels (one CTA, hence one SM, each) the kernel runs for ``size``: ring and tree trim
        them for small sizes (enqueue.cc); NVLS runs its NVLS channels (transport/nvls.cc)."""
        if self.algorithm in ("ring", "tree"):
            return _channels_used(self.tuning, self, size, self.layout.channels)
        return self.layout.nvls_channels

    def _plateau(self, size: float) -> float:
        """NCCL's ring plateau latency factor, once each rank's channel share is >= 64 bytes."""
        big = size / (self.layout.channels * self.layout.ranks) >= 64
        return self.tuning.ring_plateau_factor if self.plateau and big else 1.0

    def _bandwidth(self, size: float) -> float:
        """algbw (GB/s) on the channels NCCL uses for ``size`` (fewer for small sizes)."""
        if self.algorithm not in ("ring", "tree"):
            return self.algbw_GBps
        total = self.layout.channels
        return self.algbw_GBps * _channels_used(self.tuning, self, size, total) / total

    def _pipeline(self, size: float) -> float:
        if self.algorithm == "tree" and (self.protocol == "Simple" or self.layout.nodes > 1):
            return _tree_pipeline(self.tuning, self, size)
        if self.protocol != "Simple":
            return 1.0
        if self.algorithm in ("nvls", "nvls_tree"):
            return _nvls_pipeline(self.tuning, self.algorithm, self.layout, size)
        return 1.0


def candidates(tuning: NcclTuning, op: str, layout: Layout,
               link_algbw_GBps: dict[str, tuple[float, float]]) -> list[Candidate]:
    """Every (algorithm, protocol) NCCL could run for ``op`` on ``layout``.

    ``link_algbw_GBps`` maps each applicable algorithm to its link-limited algbw (GB/s): as it
    runs, and as NCCL's tuner sees it.
    """
    out = []
    for algorithm, (link_bw, seen_bw) in link_algbw_GBps.items():
        protocols = ("Simple",) if algorithm in SINGLE_PROTOCOL else PROTOCOLS
        for protocol in protocols:
            if protocol == "LL128" and layout.hw != "nvlink":
                continue  # NCCL enables LL128 only over NVLink (tuning.cc, protoEnable)
            if protocol != "Simple" and layout.nodes > 1 and not layout.net_ll:
                continue
            bw = protocol_algbw(tuning, op, algorithm, protocol, layout, link_bw)
            nccl_bw = protocol_algbw(tuning, op, algorithm, protocol, layout, seen_bw)
            lat = latency_s(tuning, op, algorithm, protocol, layout, layout.net_latency_s)
            seen = latency_s(tuning, op, algorithm, protocol, layout, layout.nccl_net_latency_s)
            out.append(Candidate(algorithm, protocol, lat, seen, _plateau(op, algorithm, protocol, layout),
                                 bw, nccl_bw, tuning, layout, op))
    return out


def protocol_algbw(t: NcclTuning, op: str, algorithm: str, protocol: str, lay: Layout,
                   link_bw: float) -> float:
    """Algorithm bandwidth (GB/s) of ``protocol`` given the link-limited one (tuning.cc rules)."""
    nodes, arch = lay.nodes, lay.arch
    if algorithm == "ring":
        factor = bus_factor(op, lay.ranks)
        bus = link_bw * factor
        if protocol == "LL":
            share = t.ring_ll_factor_gather if nodes == 1 and op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) \
                else t.ring_ll_factor
            bus = min(t.per_arch(t.ll_max_GBps, arch, nodes), bus * share)
        elif protocol == "LL128":
            bus = min(bus * t.ll128_factor,
                      lay.graph_channels * t.per_arch(t.ring_ll128_channel_GBps, arch, nodes))
        return bus / factor
    if algorithm == "tree":
        bus = min(2 * link_bw * t.tree_factor, lay.graph_channels * t.per_arch(t.tree_channel_GBps, arch, nodes))
        if protocol == "LL":
            bus = min(bus * t.tree_ll_factor, t.per_arch(t.ll_max_GBps, arch, nodes))
        elif protocol == "LL128":
            share = t.tree_ll128_factor_one_node if nodes == 1 else t.tree_ll128_factor_multi_node
            bus = min(bus * share, lay.graph_channels * t.per_arch(t.tree_ll128_channel_GBps, arch, nodes))
        return bus / 2
    if algorithm == "nvls_tree":
        cap = lay.nvls_channels * t.per_arch(t.nvls_tree_channel_GBps, arch, nodes)
        return min(link_bw, cap / bus_factor(op, lay.ranks)) if cap > 0 else link_bw
    return link_bw


def latency_s(t: NcclTuning, op: str, algorithm: str, protocol: str, lay: Layout, net_s: float) -> float:
    """NCCL's tuner latency of one call with network latency ``net_s``, seconds (tuning.cc,
    ``ncclTopoTuneModel``; Simple pays the network latency twice per step: data and flush)."""
    n, m = lay.ranks, lay.nodes
    base = t.base_latency(algorithm, protocol)
    intra = t.hw_latency(lay.hw, algorithm, protocol)
    inter_algorithm = "tree" if algorithm == "ring" and lay.per_node == 1 else algorithm
    inter = t.hw_latency("net", inter_algorithm, protocol) + net_s * (2 if protocol == "Simple" else 1)
    if algorithm == "ring" and op == Collective.BROADCAST:
        hop = t.hw_latency("net" if m > 1 else lay.hw, "tree" if protocol == "Simple" else "ring", protocol)
        return base + (n - 1) * hop + (m - 1) * net_s
    if algorithm == "ring":
        steps = 2 * (n - 1) if op == Collective.ALL_REDUCE else n - 1
        inter_steps = (2 * (m - 1) if op == Collective.ALL_REDUCE else m - 1) if m > 1 else 0
        if m > 1:
            overhead = t.net_overhead_us * 1e-6 * (t.net_overhead_simple_factor if protocol == "Simple" else 1)
            intra = max(intra, overhead)
        return base + (steps - inter_steps) * intra + inter_steps * inter
    if algorithm == "tree":
        return base + 2 * ((lay.per_node - 1) * intra + _log2i(m) * inter)
    if algorithm == "nvls":
        return base + t.hw_latency("nvlink", algorithm, protocol) + (inter if m > 1 else 0.0)
    # nvls_tree
    return base + t.hw_latency("nvlink", algorithm, protocol) + 2 * _log2i(m) * inter


def _plateau(op: str, algorithm: str, protocol: str, lay: Layout) -> bool:
    """NCCL's "plateau effect of ring": multi-node ring Simple all-reduce (sm80+: x1.4)."""
    return algorithm == "ring" and protocol == "Simple" and op == Collective.ALL_REDUCE and lay.nodes > 1


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def _channels_used(t: NcclTuning, c: Candidate, size: float, total: int) -> int:
    """Channels NCCL keeps for ``size``: fewer while size < channels x threads x threshold
    (src/enqueue.cc, ``topoGetAlgoInfo``)."""
    threads, threshold = {
        "LL": (t.ll_threads, t.ll_thread_threshold * (c.layout.ranks if c.algorithm == "ring" else 1)),
        "LL128": (t.ll128_threads, t.ll128_thread_threshold),
        "Simple": (t.simple_threads, t.simple_thread_threshold),
    }[c.protocol]
    return max(1, min(total, math.ceil(size / (threads * threshold))))


def _tree_chunk(t: NcclTuning, c: Candidate, size: float, channels: int) -> float:
    """Tree chunk bytes: one FIFO slot of data (LL lines carry half, LL128 15/16), shrunk for
    small messages (enqueue.cc: LL128 against 1 + log2 nodes + ppn/10; Simple against the tree
    depth in NCCL <= 2.20)."""
    chunk = t.step_bytes(c.protocol)
    if c.protocol == "LL":
        return chunk / 2
    if c.protocol == "LL128":
        chunk = chunk * 15 // 16
        ppn = c.layout.ranks / c.layout.nodes
        depth = 1 + _log2i(c.layout.nodes) + 0.1 * ppn
        for multiple, floor in ((64, 131072), (16, 32768)):
            while size // (channels * chunk) < depth * multiple / ppn and chunk > floor:
                chunk //= 2
        return chunk
    if t.tree_chunk_by_depth:
        depth = c.layout.tree_depth
        for multiple, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while size / (channels * chunk) < depth * multiple and chunk > floor:
                chunk //= 2
    return chunk


def _tree_pipeline(t: NcclTuning, c: Candidate, size: float) -> float:
    """(chunks + fill) / chunks for the chunks each tree channel pipelines (module docstring)."""
    lay = c.layout
    channels = _channels_used(t, c, size, lay.channels)
    chunks = max(1.0, size / (channels * _tree_chunk(t, c, size, channels)))
    fill = 2 * _log2i(lay.nodes) if lay.nodes > 1 else lay.tree_depth
    return (chunks + fill) / chunks


def _nvls_chunk(t: NcclTuning, algorithm: str, concurrent: int, size: float) -> int:
    """NVLS (tree) chunk bytes after NCCL's small-message reductions (enqueue.cc)."""
    chunk = t.nvls_chunk_bytes
    steps = t.nvls_chunk_steps if algorithm == "nvls" else t.nvls_tree_chunk_steps
    for multiple, smaller in steps:
        if size < multiple * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def _nvls_pipeline(t: NcclTuning, algorithm: str, lay: Layout, size: float) -> float:
    """Chunk pipeline of NVLS / NVLS tree, with idle channels for small messages."""
    heads, channels = lay.per_node, lay.nvls_channels
    chunk = _nvls_chunk(t, algorithm, channels * heads, size)
    used = max(1, min(channels, math.ceil(size / (heads * chunk))))
    chunks = max(1.0, size / (used * heads * chunk))
    stages = t.nvls_pipeline_stages + (2 * _log2i(lay.nodes) if algorithm == "nvls_tree" else 0)
    return (chunks + stages - 1) / chunks * channels / used
