"""NCCL's tuning constants, per NCCL version, as one frozen dataclass (:class:`NcclTuning`).

Every number here was read in NVIDIA/nccl (tags v2.18.5-1, v2.20.5-1, v2.27.7-1; the files are
named per field) and re-expressed, not copied: latencies in microseconds as NCCL states them,
bandwidths in GB/s, sizes in bytes. Tables indexed by algorithm use :data:`ALGORITHMS`, by
protocol :data:`PROTOCOLS`, by link class :data:`HW_CLASSES`, by GPU generation :data:`ARCHS`
and by node count :data:`NODE_CLASSES` (1 node, 2 nodes, more), as NCCL's tables are.
The versions differ where NCCL changed its model: the LL bandwidth factor (1/4 until 2.20,
1/2 since), the Simple tree and NVLS latencies, the Hopper LL ceilings and the tree chunking.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.errors import unknown_name

ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree")
PROTOCOLS = ("LL", "LL128", "Simple")
HW_CLASSES = ("nvlink", "pci", "net")
ARCHS = ("volta", "ampere", "hopper", "blackwell")
NODE_CLASSES = ("1", "2", "4+")

Row = tuple[float, float, float]  # per protocol (LL, LL128, Simple)
ArchRow = tuple[float, float, float]  # per node class (1 node, 2 nodes, more)


@dataclass(frozen=True, kw_only=True)
class NcclTuning:
    """NCCL's cost-model constants (see the module docstring for units and index orders).

    Attributes (NCCL file: src/graph/tuning.cc unless named):
        version: the NCCL release the numbers were read from.
        base_latency_us: per algorithm, per protocol: fixed latency of a call (``baseLat``).
        hw_latency_us: per link class, per algorithm, per protocol: latency per algorithm step
            over that class (``hwLat``); "net" steps add the network's own latency.
        ring_ll_factor: LL's share of the ring bandwidth (LL moves 8 data bytes per 16-byte
            line; NCCL <= 2.20 models 1/4 for all-reduce and multi-node, 2.27 models 1/2).
        ring_ll_factor_gather: the same for single-node all-gather/reduce-scatter (1/3 or 1/2).
        ll128_factor: LL128's share of ring bandwidth (120 data bytes per 128-byte line: 0.92).
        tree_factor: tree all-reduce's share of its graph bandwidth (0.92).
        tree_ll_factor: LL's share of tree bandwidth (1/3.8).
        tree_ll128_factor_one_node, tree_ll128_factor_multi_node: LL128's share of tree bandwidth
            on one node (7/9) and across nodes (120/128).
        ll_max_GBps: per architecture, per node class: ceiling of LL bus bandwidth (``llMaxBws``).
        ring_ll128_channel_GBps, tree_channel_GBps, tree_ll128_channel_GBps,
        nvls_tree_channel_GBps: per architecture, per node class: ceilings per channel
            (``perChMaxRingLL128Bws``, ``perChMaxTreeBws``, ``perChMaxTreeLL128Bws``,
            ``perChMaxNVLSTreeBws``; NVLS tree ceilings exist since 2.27).
        nvls_efficiency: per architecture: achieved fraction of NVLink bandwidth for NVLink SHARP
            traffic (``nvlsEfficiency``, 2.27; 0 = no NVLS).
        net_latency_us: the network plugin's reported NIC latency, NCCL's ``latencyInter`` (NCCL's
            IB plugin: 0; aws-ofi-nccl 1.16.3 on p4d/p4de/p5: 75 us, src/platform-aws.cpp). It
            steers NCCL's selection; predicted times use the routes' own latency instead.
        net_overhead_us: host cost of posting one network step (x86 Intel: 1 us; ``getNetOverhead``).
        net_overhead_simple_factor: Simple posts 3 network operations per step (x3).
        ring_plateau_factor: multi-node ring Simple all-reduce latency multiplier, Ampere and
            later ("Plateau effect of ring", ``ncclTopoGetAlgoTime``).
        tree_correction: per protocol, per power of two of size/64 B: NCCL's measured correction
            of tree bandwidth at medium sizes (``treeCorrectionFactor``); used for selection.
        steps: FIFO slots per connection (``NCCL_STEPS``, src/include/device.h).
        simple_buffer_bytes, ll128_buffer_bytes, ll_buffer_bytes: FIFO sizes per connection
            (``DEFAULT_BUFFSIZE``, ``DEFAULT_LL128_BUFFSIZE``, ``DEFAULT_LL_BUFFSIZE``, src/init.cc).
        ring_chunk_steps: FIFO steps per ring all-reduce chunk (``ALLREDUCE_CHUNKSTEPS``,
            src/include/collectives.h).
        tree_chunk_by_depth: shrink tree Simple chunks when the message is small against the
            tree depth (NCCL <= 2.20, src/enqueue.cc ``computeColl``; removed by 2.27).
        nvls_chunk_bytes: NVLS chunk (``NCCL_NVLS_CHUNKSIZE``, src/transport/nvls.cc).
        nvls_chunk_steps: (multiple of concurrent chunks, chunk) pairs: below size multiple x
            (nvls channels x heads x chunk) the NVLS chunk drops to chunk (src/enqueue.cc).
        nvls_tree_chunk_steps: the same rule for NVLS tree.
        nvls_channels: per architecture: channels of NVLS collectives on one node
            (``NVLS_NCHANNELS``: 16 on Hopper, 24 on one Blackwell NVLink domain).
        nvls_pipeline_stages: warp groups an NVLS all-reduce chunk passes through: scatter,
            reduce+multicast, gather (src/device/all_reduce.h, NVLS kernel).
        max_graph_channels: channels NCCL's topology search builds at most per graph
            (``MAXCHANNELS / 2``, src/graph/search.cc); connect.cc then doubles them.
        simple_thread_threshold, ll_thread_threshold, ll128_thread_threshold: bytes per thread
            below which NCCL uses fewer channels (``NCCL_*_THREAD_THRESHOLD``, src/include/comm.h;
            LL's ring threshold is multiplied by the rank count).
        simple_threads, ll_threads, ll128_threads: threads per channel (``NCCL_*_MAX_NTHREADS``).
    """

    version: str
    base_latency_us: tuple[Row, Row, Row, Row]
    hw_latency_us: tuple[tuple[Row, Row, Row, Row], tuple[Row, Row, Row, Row], tuple[Row, Row, Row, Row]]
    ring_ll_factor: float
    ring_ll_factor_gather: float
    ll128_factor: float = 0.92
    tree_factor: float = 0.92
    tree_ll_factor: float = 1 / 3.8
    tree_ll128_factor_one_node: float = 7 / 9
    tree_ll128_factor_multi_node: float = 120 / 128
    ll_max_GBps: tuple[ArchRow, ArchRow, ArchRow, ArchRow]
    ring_ll128_channel_GBps: tuple[ArchRow, ArchRow, ArchRow, ArchRow]
    tree_channel_GBps: tuple[ArchRow, ArchRow, ArchRow, ArchRow]
    tree_ll128_channel_GBps: tuple[ArchRow, ArchRow, ArchRow, ArchRow]
    nvls_tree_channel_GBps: tuple[ArchRow, ArchRow, ArchRow, ArchRow]
    nvls_efficiency: tuple[float, float, float, float] = (0.0, 0.0, 0.85, 0.74)
    net_latency_us: float = 0.0
    net_overhead_us: float = 1.0
    net_overhead_simple_factor: float = 3.0
    ring_plateau_factor: float = 1.4
    tree_correction: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    steps: int = 8
    simple_buffer_bytes: int = 1 << 22
    ll128_buffer_bytes: int = 120 * 640 * 8 * 8
    ll_buffer_bytes: int = 8 * 512 * 8 * 16
    ring_chunk_steps: int = 4
    tree_chunk_by_depth: bool
    nvls_chunk_bytes: int = 128 * 1024
    nvls_chunk_steps: tuple[tuple[int, int], ...] = ((64, 65536), (8, 32768), (2, 16384))
    nvls_tree_chunk_steps: tuple[tuple[int, int], ...] = ((32, 262144), (16, 131072), (4, 65536),
                                                          (1, 32768))
    nvls_channels: tuple[int, int, int, int] = (0, 0, 16, 24)
    nvls_pipeline_stages: int = 3
    max_graph_channels: int = 16
    simple_thread_threshold: int = 64
    ll_thread_threshold: int = 8
    ll128_thread_threshold: int = 8
    simple_threads: int = 512
    ll_threads: int = 512
    ll128_threads: int = 640

    # ---- lookups ----
    def base_latency(self, algorithm: str, protocol: str) -> float:
        """Fixed latency of a call, seconds."""
        return self.base_latency_us[ALGORITHMS.index(algorithm)][PROTOCOLS.index(protocol)] * 1e-6

    def hw_latency(self, hw: str, algorithm: str, protocol: str) -> float:
        """Latency of one algorithm step over link class ``hw``, seconds."""
        row = self.hw_latency_us[HW_CLASSES.index(hw)][ALGORITHMS.index(algorithm)]
        return row[PROTOCOLS.index(protocol)] * 1e-6

    def per_arch(self, table: tuple[ArchRow, ...], arch: str, nodes: int) -> float:
        """A per-architecture, per-node-class entry (GB/s)."""
        return table[ARCHS.index(arch)][0 if nodes <= 1 else 1 if nodes == 2 else 2]

    def step_bytes(self, protocol: str) -> int:
        """Bytes of one FIFO slot (``buffSizes[protocol] / NCCL_STEPS``)."""
        size = {"LL": self.ll_buffer_bytes, "LL128": self.ll128_buffer_bytes,
                "Simple": self.simple_buffer_bytes}[protocol]
        return size // self.steps

    def correction(self, protocol: str, size_bytes: float) -> float:
        """NCCL's medium-size tree bandwidth correction for a message of ``size_bytes``."""
        index = int(size_bytes // 64).bit_length() - 1
        row = self.tree_correction[PROTOCOLS.index(protocol)]
        return row[index] if 0 <= index < len(row) else 1.0


# ---- NCCL 2.18.5 (the version of the Azure ND A100 v4 / ND H100 v5 measurements) ----
_V2_18 = NcclTuning(
    version="2.18",
    # baseLat: Tree, Ring; NVLS / NVLS tree Simple 23 us (base, 2.18).
    base_latency_us=((6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (0.0, 0.0, 23.0), (0.0, 0.0, 23.0)),
    hw_latency_us=(
        ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),    # NVLink
        ((1.0, 1.9, 6.0), (1.0, 2.5, 5.7), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),     # PCI
        ((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 19.0)),  # NET
    ),
    ring_ll_factor=1 / 4, ring_ll_factor_gather=1 / 3,
    ll_max_GBps=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0)),
    ring_ll128_channel_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7),
                             (36.7, 36.7, 36.7)),
    tree_channel_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (38.7, 41.4, 36.0)),
    tree_ll128_channel_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0),
                             (36.7, 36.7, 29.0)),
    nvls_tree_channel_GBps=((0.0, 0.0, 0.0),) * 4,  # no per-channel NVLS tree ceiling before 2.27
    tree_correction=(
        (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
        (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
        (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
    ),
    tree_chunk_by_depth=True,
)

# ---- NCCL 2.20.5 (ND H200 v5): Simple tree 28 us per hop, NVLS 23 us as a per-step latency ----
_V2_20 = replace(
    _V2_18, version="2.20",
    base_latency_us=((6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    hw_latency_us=(
        ((0.6, 1.25, 28.0), (0.6, 1.9, 3.4), (0.0, 0.0, 23.0), (0.0, 0.0, 23.0)),
        ((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
        ((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 14.0)),
    ),
)

# ---- NCCL 2.27.7 (the AWS p4de / p5 measurements; the default) ----
_V2_27 = replace(
    _V2_20, version="2.27",
    base_latency_us=((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    hw_latency_us=(
        ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0.0, 0.0, 25.0), (0.0, 0.0, 25.0)),
        ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
        ((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 20.9)),
    ),
    ring_ll_factor=1 / 2, ring_ll_factor_gather=1 / 2,
    ll_max_GBps=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0)),
    ring_ll128_channel_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7),
                             (40.0, 40.0, 40.0)),
    tree_channel_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0)),
    tree_ll128_channel_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0),
                             (55.6, 31.67, 20.0)),
    nvls_tree_channel_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0)),
    tree_correction=(
        (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
        (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
        (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
    ),
    tree_chunk_by_depth=False,
)

# ---- NCCL 2.27.7 with the aws-ofi-nccl 1.16.3 network plugin (AWS p4d/p4de/p5) ----
# The plugin (src/platform-aws.cpp) reports a 75 us NIC latency and sets NCCL_BUFFSIZE=8 MiB
# (1 MiB Simple slots); on p5 also NCCL_NVLS_CHUNKSIZE = NCCL_NVLSTREE_MAX_CHUNKSIZE = 512 KiB.
_V2_27_AWS = replace(_V2_27, version="2.27-aws", net_latency_us=75.0, simple_buffer_bytes=8 << 20,
                     nvls_chunk_bytes=512 * 1024)

_VERSIONS: dict[str, NcclTuning] = {t.version: t for t in (_V2_18, _V2_20, _V2_27, _V2_27_AWS)}
NCCL_VERSIONS = tuple(_VERSIONS)
DEFAULT_NCCL_VERSION = "2.27"


def get_nccl_tuning(version: str = DEFAULT_NCCL_VERSION) -> NcclTuning:
    """NCCL's tuning constants for ``version`` (the error lists the known versions)."""
    try:
        return _VERSIONS[version]
    except KeyError:
        raise unknown_name("NCCL version", version, _VERSIONS) from None
