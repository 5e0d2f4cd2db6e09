"""Build the cluster graph (networkx) from a :class:`topo.cluster.ClusterSpec`.

Vertex attributes:
    kind: gpu | nvswitch | pcie_switch | cpu | nic | dram | nvme | leaf | pod | core.
    node: node (server) index; -1 for fabric switches.
    local: index inside the node (GPU, PCIe switch, socket, NIC); for a leaf its rail; else -1.
    device: global device id (gpu vertices only; = node * gpus_per_node + local).
Edge attributes (links are full duplex; numbers are per direction):
    bandwidth_GBps: line rate, GB/s.  efficiency: achievable fraction for NCCL traffic.
    latency_s: per traversal, seconds.  link: link preset name.  link_kind: LinkSpec.kind.
The NVSwitches of a node are one vertex (non-blocking). NIC ports beyond one per GPU are grouped
into one vertex per GPU (its edges carry the summed bandwidth). A leaf's uplinks are one edge to
``core`` with capacity = the leaf's nominal downlink capacity (nodes_per_leaf full) /
oversubscription; the core itself is non-blocking. On a three-tier Clos
(``leaf_blocks_per_pod`` > 0) the leaves uplink to their pod's aggregation vertex instead (same
capacity), and each pod uplinks to ``core`` with its leaves' uplink capacity / pod_oversubscription
(one pod: no core). This keeps a 16k-GPU graph near 70k edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topo import naming
from topo.cluster import ClusterSpec
from topo.link import LinkSpec

if TYPE_CHECKING:
    import networkx as nx

Edge = tuple[str, str, dict[str, Any]]
Vertex = tuple[str, dict[str, Any]]


def build_cluster_graph(spec: ClusterSpec) -> nx.Graph:
    """The cluster as an undirected networkx graph with the attributes documented above."""
    import networkx as nx  # only callers that want the graph pay for networkx

    vertices, edges = cluster_elements(spec)
    graph = nx.Graph(name=spec.name)
    graph.add_nodes_from(vertices)
    graph.add_edges_from(edges)
    return graph


def cluster_elements(spec: ClusterSpec) -> tuple[list[Vertex], list[Edge]]:
    """The graph's (vertex, attributes) and (u, v, attributes) lists, without building networkx.

    Attribute dicts may be shared between edges; treat them as read-only.
    """
    vertices: list[Vertex] = []
    edges: list[Edge] = []
    links = _link_attrs(spec)
    for node in range(spec.nodes):
        _add_node_vertices(spec, node, links, vertices, edges)
    _add_fabric(spec, vertices, edges)
    return vertices, edges


def _attrs(link: LinkSpec, scale: float = 1.0) -> dict[str, Any]:
    return {"bandwidth_GBps": link.bandwidth_GBps * scale, "latency_s": link.latency_s,
            "link": link.name, "link_kind": link.kind, "efficiency": link.efficiency}


def _link_attrs(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """Edge attribute dicts by role, built once (networkx copies them into each edge)."""
    links = {"pcie": _attrs(spec.pcie), "socket": _attrs(spec.socket_link),
             "nic_pcie": _attrs(spec.pcie, spec.ports_per_graph_nic)}
    if spec.nvlink is not None:
        links["nvlink"] = _attrs(spec.nvlink)
    return links


def _vertex(kind: str, node: int, local: int, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "node": node, "local": local, **extra}


def _add_node_vertices(spec: ClusterSpec, node: int, links: dict[str, dict[str, Any]],
                       nodes: list, edges: list[Edge]) -> None:
    """GPUs, switches, CPUs, memory tiers and NICs of one node, with their links."""
    sockets = spec.host.cpu_sockets
    for s in range(sockets):
        nodes.append((naming.cpu(node, s), _vertex("cpu", node, s)))
        for t in range(s + 1, sockets):
            edges.append((naming.cpu(node, s), naming.cpu(node, t), links["socket"]))
    for local in range(spec.gpus_per_node):
        nodes.append((naming.gpu(node, local),
                      _vertex("gpu", node, local, device=node * spec.gpus_per_node + local)))
    if spec.intra_node == "host":
        for local in range(spec.gpus_per_node):
            cpu = naming.cpu(node, spec.socket_of_local(local))
            edges.append((naming.gpu(node, local), cpu, links["pcie"]))
    else:
        _add_pcie_tree(spec, node, links, nodes, edges)
    if spec.intra_node == "nvswitch":
        nodes.append((naming.nvswitch(node), _vertex("nvswitch", node, -1)))
        for local in range(spec.gpus_per_node):
            edges.append((naming.gpu(node, local), naming.nvswitch(node), links["nvlink"]))
    _add_memory_tiers(spec, node, nodes, edges)


def _add_pcie_tree(spec: ClusterSpec, node: int, links: dict[str, dict[str, Any]],
                   nodes: list, edges: list[Edge]) -> None:
    """PCIe switches under the CPU sockets, GPUs and NICs under the switches."""
    for j in range(spec.pcie_switches_per_node):
        sw = naming.pcie_switch(node, j)
        nodes.append((sw, _vertex("pcie_switch", node, j)))
        edges.append((sw, naming.cpu(node, spec.socket_of_switch(j)), links["pcie"]))
    for local in range(spec.gpus_per_node):
        sw = naming.pcie_switch(node, spec.switch_of_local(local))
        edges.append((naming.gpu(node, local), sw, links["pcie"]))
    for i in range(spec.graph_nics_per_node):
        sw = naming.pcie_switch(node, spec.switch_of_nic(i))
        nodes.append((naming.nic(node, i), _vertex("nic", node, i, ports=spec.ports_per_graph_nic)))
        edges.append((naming.nic(node, i), sw, links["nic_pcie"]))


def _add_memory_tiers(spec: ClusterSpec, node: int, nodes: list, edges: list[Edge]) -> None:
    """DRAM on every socket (bandwidth split evenly) and NVMe on socket 0."""
    host = spec.host
    nodes.append((naming.dram(node), _vertex("dram", node, -1, capacity_bytes=host.dram_bytes)))
    per_socket = host.dram_GBps / host.cpu_sockets
    for s in range(host.cpu_sockets):
        edges.append((naming.cpu(node, s), naming.dram(node),
                      {"bandwidth_GBps": per_socket, "latency_s": 0.0, "link": "dram",
                       "link_kind": "memory", "efficiency": 1.0}))
    if host.nvme_bytes > 0:
        nodes.append((naming.nvme(node), _vertex("nvme", node, -1, capacity_bytes=host.nvme_bytes)))
        edges.append((naming.cpu(node, 0), naming.nvme(node),
                      {"bandwidth_GBps": host.nvme_read_GBps, "write_GBps": host.nvme_write_GBps,
                       "latency_s": 0.0, "link": "nvme", "link_kind": "storage", "efficiency": 1.0}))


def _add_fabric(spec: ClusterSpec, nodes: list, edges: list[Edge]) -> None:
    """Leaf switches (one per block, or per block and rail), NIC downlinks, aggregated uplinks."""
    if spec.fabric == "single-node":
        return
    assert spec.nic is not None  # validated by ClusterSpec
    rail_opt = spec.fabric == "rail-optimized"
    rails = spec.graph_nics_per_node if rail_opt else 1
    ports = spec.ports_per_graph_nic
    nics_per_leaf = spec.nodes_per_leaf * spec.graph_nics_per_node // rails
    uplink = _attrs(spec.nic, ports * nics_per_leaf / spec.oversubscription)
    leaves = [(b, r) for b in range(spec.num_leaf_blocks) for r in range(rails)]
    pods = spec.num_pods
    for block, rail in leaves:
        name = naming.leaf(block, rail, rail_opt)
        nodes.append((name, _vertex("leaf", -1, rail, block=block)))
        if pods:
            edges.append((name, naming.pod(spec.pod_of_block(block)), uplink))
        elif len(leaves) > 1:
            edges.append((name, naming.CORE, uplink))
    if pods:
        _add_pods(spec, uplink, rails, nodes, edges)
    elif len(leaves) > 1:
        nodes.append((naming.CORE, _vertex("core", -1, -1)))
    downlink = _attrs(spec.nic, ports)
    for node in range(spec.nodes):
        for i in range(spec.graph_nics_per_node):
            block, rail = spec.leaf_of(node, i)
            edges.append((naming.nic(node, i), naming.leaf(block, rail, rail_opt), downlink))


def _add_pods(spec: ClusterSpec, uplink: dict[str, Any], rails: int, nodes: list,
              edges: list[Edge]) -> None:
    """Pod aggregation vertices and their uplinks to the core (a full pod's leaf uplinks / pod
    oversubscription); a single pod needs no core."""
    assert spec.nic is not None  # validated by ClusterSpec
    leaves_per_pod = spec.leaf_blocks_per_pod * rails
    pod_uplink = _attrs(spec.nic, uplink["bandwidth_GBps"] / spec.nic.bandwidth_GBps
                        * leaves_per_pod / spec.pod_oversubscription)
    for pod in range(spec.num_pods):
        nodes.append((naming.pod(pod), _vertex("pod", -1, pod)))
        if spec.num_pods > 1:
            edges.append((naming.pod(pod), naming.CORE, pod_uplink))
    if spec.num_pods > 1:
        nodes.append((naming.CORE, _vertex("core", -1, -1)))
