"""The cluster: a device, how devices are wired inside a node, NICs, the fabric, host tiers, price.

A :class:`ClusterSpec` is pure data; :func:`topo.graph.build_cluster_graph` turns it into a
networkx graph and :mod:`topo.routing` routes over it. Global device id = node * gpus_per_node + local.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import (
    invalid,
    replace_checked,
    require_choice,
    require_nonnegative_int,
    require_number,
    require_positive_int,
)
from topo.device import DeviceSpec
from topo.host import HostSpec
from topo.link import LinkSpec
from topo.nccl_tuning import DEFAULT_NCCL_VERSION, NCCL_VERSIONS

MAX_NODES = 1_000_000  # bounds that refuse sizes no run could use (a job file's and the flags' too)
MAX_GPUS_PER_NODE = 1024
MAX_PRICE_PER_GPU_HOUR_USD = 1e6

INTRA_NODE_KINDS = ("nvswitch", "pcie", "host")
FABRICS = ("fat-tree", "rail-optimized", "single-node")


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A homogeneous cluster.

    Attributes:
        name: preset or file name.
        device: the accelerator of every slot.
        nodes: number of nodes (servers).
        gpus_per_node: devices per node (for intra_node="host": CPU processes per host).
        intra_node: nvswitch (every GPU has ``nvlink`` to one NVSwitch fabric) | pcie (GPUs talk
            over PCIe switches and the CPU root complex) | host (CPU processes talk through host
            memory over ``pcie``, which is then a shared-memory link).
        nvlink: one GPU's NVLink to the NVSwitch fabric (required for nvswitch).
        pcie: one device's (GPU, NIC) PCIe link; also each PCIe switch's uplink to its CPU.
        gpus_per_pcie_switch: GPUs under one PCIe switch (1 = each GPU on its own root port).
        pcie_p2p: GPUs under one PCIe switch may talk directly (False: GeForce cards, traffic
            bounces through the CPU).
        nic: one NIC port (None for a single-node box).
        nics_per_node: NIC ports per node. More NICs than GPUs are grouped per GPU in the graph.
        fabric: fat-tree (every NIC of a leaf's nodes on one leaf switch) | rail-optimized (NIC i
            of each node on rail leaf i) | single-node (no fabric; nodes must be 1).
        oversubscription: leaf downlink / uplink capacity ratio (>= 1).
        nodes_per_leaf: nodes under one leaf (fat-tree) or one rail group (rail-optimized).
        leaf_blocks_per_pod: 0 = two tiers (every leaf uplinks to one non-blocking core);
            k >= 1 = three-tier Clos: k leaf blocks (their leaves) form a pod under a pod
            aggregation layer, and the pods uplink to the core (Llama 3: 192 racks per pod).
        pod_oversubscription: pod aggregation downlink / core uplink capacity ratio (>= 1;
            Llama 3's aggregation layer: 7).
        host: CPU sockets, DRAM and NVMe of each node.
        socket_link: link between CPU sockets (UPI/xGMI).
        price_per_gpu_hour_usd: on-demand price of one device for one hour, USD.
        nccl_version: the NCCL release whose tuning model prices collectives (topo/nccl_tuning.py).
    """

    name: str
    device: DeviceSpec
    nodes: int = 1
    gpus_per_node: int = 8
    intra_node: str = "nvswitch"
    nvlink: LinkSpec | None = None
    pcie: LinkSpec
    gpus_per_pcie_switch: int = 2
    pcie_p2p: bool = True
    nic: LinkSpec | None = None
    nics_per_node: int = 0
    fabric: str = "fat-tree"
    oversubscription: float = 1.0
    nodes_per_leaf: int = 1
    host: HostSpec
    socket_link: LinkSpec
    price_per_gpu_hour_usd: float = 0.0
    leaf_blocks_per_pod: int = 0
    pod_oversubscription: float = 1.0
    nccl_version: str = DEFAULT_NCCL_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise invalid("name", self.name, "expected a non-empty string")
        for name in ("nodes", "gpus_per_node", "gpus_per_pcie_switch", "nodes_per_leaf"):
            require_positive_int(name, getattr(self, name))
        for name, most in (("nodes", MAX_NODES), ("gpus_per_node", MAX_GPUS_PER_NODE)):
            if getattr(self, name) > most:
                raise invalid(name, getattr(self, name), f"expected an integer in [1, {most}]")
        require_nonnegative_int("nics_per_node", self.nics_per_node)
        require_choice("intra_node", self.intra_node, INTRA_NODE_KINDS)
        require_choice("fabric", self.fabric, FABRICS)
        require_number("oversubscription", self.oversubscription, low=1.0)
        require_nonnegative_int("leaf_blocks_per_pod", self.leaf_blocks_per_pod)
        require_number("pod_oversubscription", self.pod_oversubscription, low=1.0)
        require_choice("nccl_version", self.nccl_version, NCCL_VERSIONS)
        require_number("price_per_gpu_hour_usd", self.price_per_gpu_hour_usd, high=MAX_PRICE_PER_GPU_HOUR_USD)
        if not isinstance(self.pcie_p2p, bool):
            raise invalid("pcie_p2p", self.pcie_p2p, "expected true or false")
        self._check_links()
        self._check_fabric()

    def _check_links(self) -> None:
        if self.intra_node == "nvswitch" and (self.nvlink is None or self.nvlink.kind != "nvlink"):
            raise invalid("nvlink", getattr(self.nvlink, "name", None),
                          "intra_node='nvswitch' needs an nvlink link")
        wanted = "shm" if self.intra_node == "host" else "pcie"
        if self.pcie.kind != wanted:
            raise invalid("pcie", self.pcie.name, f"intra_node={self.intra_node!r} needs a {wanted} link")

    def _check_fabric(self) -> None:
        if self.intra_node == "host" and self.fabric != "single-node":
            raise invalid("fabric", self.fabric, "intra_node='host' (CPU processes) needs 'single-node'")
        if self.fabric == "single-node":
            if self.nodes != 1:
                raise invalid("nodes", self.nodes, "fabric='single-node' needs nodes=1")
            return
        if self.nic is None or self.nics_per_node < 1:
            raise invalid("nics_per_node", self.nics_per_node,
                          f"fabric={self.fabric!r} needs a nic and nics_per_node >= 1")
        n, g = self.nics_per_node, self.gpus_per_node
        if (n >= g and n % g) or (n < g and g % n):
            raise invalid("nics_per_node", n, f"must divide or be a multiple of gpus_per_node={g}")

    # ---- sizes ----
    @property
    def num_gpus(self) -> int:
        """Devices in the cluster (nodes x gpus_per_node)."""
        return self.nodes * self.gpus_per_node

    @property
    def pcie_switches_per_node(self) -> int:
        """PCIe switches (or root ports) per node."""
        return math.ceil(self.gpus_per_node / self.gpus_per_pcie_switch)

    @property
    def graph_nics_per_node(self) -> int:
        """NIC vertices per node in the graph: NIC ports beyond one per GPU are grouped per GPU."""
        return min(self.nics_per_node, self.gpus_per_node) if self.fabric != "single-node" else 0

    @property
    def ports_per_graph_nic(self) -> int:
        """NIC ports one NIC vertex stands for (p5: 32 EFA ports / 8 GPUs = 4)."""
        return max(1, self.nics_per_node // self.gpus_per_node)

    @property
    def num_leaf_blocks(self) -> int:
        """Groups of ``nodes_per_leaf`` nodes (a fat-tree leaf, or a rail group's set of leaves)."""
        return math.ceil(self.nodes / self.nodes_per_leaf)

    @property
    def num_pods(self) -> int:
        """Pods of a three-tier Clos (0 for a two-tier fabric)."""
        if not self.leaf_blocks_per_pod or self.fabric == "single-node":
            return 0
        return math.ceil(self.num_leaf_blocks / self.leaf_blocks_per_pod)

    @property
    def period_nodes(self) -> int:
        """Nodes after which the fabric repeats itself (a leaf block; a pod on three tiers)."""
        if self.num_pods == 0:
            return self.nodes_per_leaf
        return self.nodes_per_leaf * self.leaf_blocks_per_pod

    def pod_of_block(self, block: int) -> int:
        """Pod of a leaf block (0 on a two-tier fabric)."""
        return block // self.leaf_blocks_per_pod if self.num_pods else 0

    # ---- where things attach (local indices) ----
    def node_of(self, device: int) -> int:
        """Node index of a global device id."""
        return device // self.gpus_per_node

    def local_of(self, device: int) -> int:
        """Index of a global device inside its node."""
        return device % self.gpus_per_node

    def switch_of_local(self, local: int) -> int:
        """PCIe switch of a GPU."""
        return local // self.gpus_per_pcie_switch

    def socket_of_switch(self, switch: int) -> int:
        """CPU socket a PCIe switch hangs off (switches spread evenly over sockets)."""
        return switch * self.host.cpu_sockets // self.pcie_switches_per_node

    def socket_of_local(self, local: int) -> int:
        """CPU socket of a device (for intra_node='host': processes spread evenly)."""
        if self.intra_node == "host":
            return local * self.host.cpu_sockets // self.gpus_per_node
        return self.socket_of_switch(self.switch_of_local(local))

    def nic_of_local(self, local: int) -> int:
        """The NIC (graph vertex) closest to a GPU: NIC i serves GPUs [i*share, (i+1)*share)."""
        return local // self._gpus_per_graph_nic()

    def switch_of_nic(self, nic: int) -> int:
        """PCIe switch of a NIC: the switch of the first GPU it serves."""
        return self.switch_of_local(nic * self._gpus_per_graph_nic())

    def _gpus_per_graph_nic(self) -> int:
        if self.graph_nics_per_node == 0:
            raise invalid("fabric", self.fabric, f"cluster {self.name!r} has no NICs")
        return self.gpus_per_node // self.graph_nics_per_node

    def leaf_of(self, node: int, nic: int) -> tuple[int, int]:
        """(leaf block, rail) of a NIC; rail is 0 on a fat-tree (one leaf per block)."""
        rail = nic if self.fabric == "rail-optimized" else 0
        return node // self.nodes_per_leaf, rail

    def with_overrides(self, overrides: Mapping[str, Any]) -> ClusterSpec:
        """A copy with some fields replaced (validated); an unknown field name is a ValueError."""
        return replace_checked(self, overrides)  # type: ignore[no-any-return]
