"""Structural routes between devices over the cluster graph, as tuples of directed edge ids.

Routes follow the wiring, not a graph search (``nx.shortest_path`` per pair is far too slow for
16k GPUs): same node via the NVSwitch; PCIe boxes via the PCIe switch (P2P) or up through the CPU
root complex(es); across nodes GPU -> its PCIe switch (-> CPU -> the NIC's switch) -> its closest
NIC -> leaf (-> core -> leaf) -> NIC -> ... -> GPU (GPUDirect RDMA). On a three-tier Clos the
middle is leaf (-> pod (-> core -> pod) -> leaf): up only as far as the two leaves' lowest common
ancestor. Directed edge ``2k`` is the k-th graph edge in its stored orientation, ``2k + 1`` the
reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from topo import naming
from topo.cluster import ClusterSpec
from topo.graph import cluster_elements

if TYPE_CHECKING:
    import networkx as nx  # annotations only


class Router:
    """Routes and per-edge capacities of one cluster graph.

    Attributes:
        spec: the cluster.
        vertex_attrs: attributes of every vertex (see :mod:`topo.graph`).
        edge_attrs: attributes of every undirected edge; directed edge e is edge_attrs[e // 2].
        ends: (tail, head) vertex names of every directed edge id.
        seconds_per_byte: 1 / (bandwidth * efficiency) of every directed edge, s/byte (an edge
            with ``write_GBps``, CPU <-> NVMe, uses it in the direction into the drives).
        latency_s: latency of every directed edge, seconds.
        switch_to_switch: per directed edge, True between two fabric switches (leaf, pod, core).
    """

    def __init__(self, spec: ClusterSpec, graph: nx.Graph | None = None) -> None:
        """Index ``graph`` (default: the spec's own graph, built without networkx)."""
        self.spec = spec
        if graph is None:
            vertices, edges = cluster_elements(spec)
        else:
            vertices, edges = list(graph.nodes(data=True)), list(graph.edges(data=True))
        self.vertex_attrs = dict(vertices)
        self.edge_attrs = [data for _, _, data in edges]
        self.ends = [end for u, v, _ in edges for end in ((u, v), (v, u))]
        self._eid = {end: i for i, end in enumerate(self.ends)}
        bandwidth = np.array([d["bandwidth_GBps"] * d["efficiency"] for d in self.edge_attrs])
        self.seconds_per_byte = np.repeat(1.0 / (bandwidth * 1e9), 2)
        for k, d in enumerate(self.edge_attrs):  # a drive writes slower than it reads
            if "write_GBps" in d:
                into_drive = 2 * k if self.vertex_attrs[self.ends[2 * k][1]]["kind"] == "nvme" else 2 * k + 1
                self.seconds_per_byte[into_drive] = 1.0 / (d["write_GBps"] * d["efficiency"] * 1e9)
        self.latency_s = np.repeat(np.array([d["latency_s"] for d in self.edge_attrs]), 2)
        fabric = {"leaf", "pod", "core"}
        self.switch_to_switch = np.repeat(np.array(
            [self.vertex_attrs[u]["kind"] in fabric and self.vertex_attrs[v]["kind"] in fabric
             for u, v in self.ends[::2]], dtype=bool), 2)
        self.nic_of_device: list[int] = []
        self._intra: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}
        self._up: list[tuple[tuple[int, ...], float]] = []
        self._down: list[tuple[tuple[int, ...], float]] = []
        self.leaf_of_device: list[int] = []
        self._leaf_links: dict[int, tuple[int, int, float]] = {}
        self._pod_links: dict[int, tuple[int, int, float]] = {}
        self._pod_of_leaf: dict[int, int] = {}
        if spec.fabric != "single-node":
            self._index_fabric_paths()
        else:
            self.nic_of_device = [0] * spec.num_gpus
            self.leaf_of_device = [0] * spec.num_gpus
        self._index_arrays()

    # ---- vertex paths (the structural function) ----
    def vertex_path(self, src: int, dst: int) -> list[str]:
        """Vertices from device ``src`` to device ``dst`` (both global ids), endpoints included."""
        s = self.spec
        na, nb, la, lb = s.node_of(src), s.node_of(dst), s.local_of(src), s.local_of(dst)
        if src == dst:
            return [naming.gpu(na, la)]
        if na == nb:
            return self._intra_vertices(na, la, lb)
        up = self._to_nic_vertices(na, la)
        down = self._to_nic_vertices(nb, lb)[::-1]
        return up + self._fabric_vertices(na, s.nic_of_local(la), nb, s.nic_of_local(lb)) + down

    def _intra_vertices(self, node: int, la: int, lb: int) -> list[str]:
        s = self.spec
        if s.intra_node == "nvswitch":
            return [naming.gpu(node, la), naming.nvswitch(node), naming.gpu(node, lb)]
        if s.intra_node == "host":
            return ([naming.gpu(node, la)] + self._cpus(node, s.socket_of_local(la), s.socket_of_local(lb))
                    + [naming.gpu(node, lb)])
        sa, sb = s.switch_of_local(la), s.switch_of_local(lb)
        return ([naming.gpu(node, la)] + self._between_switches(node, sa, sb, s.pcie_p2p)
                + [naming.gpu(node, lb)])

    def _between_switches(self, node: int, sa: int, sb: int, p2p: bool) -> list[str]:
        """PCIe switch sa to switch sb: directly if equal (and P2P), else up through the CPUs."""
        s = self.spec
        if sa == sb and p2p:
            return [naming.pcie_switch(node, sa)]
        cpus = self._cpus(node, s.socket_of_switch(sa), s.socket_of_switch(sb))
        return [naming.pcie_switch(node, sa)] + cpus + [naming.pcie_switch(node, sb)]

    @staticmethod
    def _cpus(node: int, sa: int, sb: int) -> list[str]:
        return [naming.cpu(node, sa)] if sa == sb else [naming.cpu(node, sa), naming.cpu(node, sb)]

    def _to_nic_vertices(self, node: int, local: int) -> list[str]:
        """GPU up to its closest NIC (NIC traffic is peer-to-peer through the PCIe switch)."""
        s = self.spec
        nic = s.nic_of_local(local)
        switches = self._between_switches(node, s.switch_of_local(local), s.switch_of_nic(nic), True)
        return [naming.gpu(node, local)] + switches + [naming.nic(node, nic)]

    def _fabric_vertices(self, na: int, nic_a: int, nb: int, nic_b: int) -> list[str]:
        s = self.spec
        rail_opt = s.fabric == "rail-optimized"
        (block_a, rail_a), (block_b, rail_b) = s.leaf_of(na, nic_a), s.leaf_of(nb, nic_b)
        leaf_a, leaf_b = naming.leaf(block_a, rail_a, rail_opt), naming.leaf(block_b, rail_b, rail_opt)
        if leaf_a == leaf_b:
            return [leaf_a]
        if not s.num_pods:
            return [leaf_a, naming.CORE, leaf_b]
        pod_a, pod_b = naming.pod(s.pod_of_block(block_a)), naming.pod(s.pod_of_block(block_b))
        if pod_a == pod_b:
            return [leaf_a, pod_a, leaf_b]
        return [leaf_a, pod_a, naming.CORE, pod_b, leaf_b]

    # ---- edge-id routes ----
    def edges_of(self, vertices: Sequence[str]) -> tuple[int, ...]:
        """Directed edge ids along a vertex path (KeyError if two vertices are not adjacent)."""
        return tuple(self._eid[(a, b)] for a, b in zip(vertices[:-1], vertices[1:], strict=True))

    def edge_id(self, tail: str, head: str) -> int:
        """Directed edge id of tail -> head."""
        return self._eid[(tail, head)]

    def intra(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """(edge ids, latency_s) of a same-node route (cached per device pair)."""
        key = (src, dst)
        hit = self._intra.get(key)
        if hit is None:
            edges = self.edges_of(self.vertex_path(src, dst))
            hit = (edges, float(sum(self.latency_s[e] for e in edges)))
            self._intra[key] = hit
        return hit

    def up(self, device: int) -> tuple[tuple[int, ...], float]:
        """(edge ids, latency_s) from a device to its NIC's leaf switch."""
        return self._up[device]

    def down(self, device: int) -> tuple[tuple[int, ...], float]:
        """(edge ids, latency_s) from a device's leaf switch down to the device."""
        return self._down[device]

    def leaf_links(self, leaf: int) -> tuple[int, int, float]:
        """(leaf->up edge, up->leaf edge, latency_s of one) of a leaf vertex index; "up" is the
        core on two tiers, the leaf's pod on three."""
        return self._leaf_links[leaf]

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """(edge ids, latency_s) from device ``src`` to device ``dst``."""
        if self.spec.node_of(src) == self.spec.node_of(dst):
            return self.intra(src, dst)
        (up, lat_up), (down, lat_down) = self._up[src], self._down[dst]
        la, lb = self.leaf_of_device[src], self.leaf_of_device[dst]
        if la == lb:
            return up + down, lat_up + lat_down
        out_a, _, lat_a = self._leaf_links[la]
        _, in_b, lat_b = self._leaf_links[lb]
        middle: tuple[int, ...] = (out_a, in_b)
        lat_mid = lat_a + lat_b
        pa, pb = self._pod_of_leaf.get(la, 0), self._pod_of_leaf.get(lb, 0)
        if pa != pb:
            pod_out, _, lat_pa = self._pod_links[pa]
            _, pod_in, lat_pb = self._pod_links[pb]
            middle, lat_mid = (out_a, pod_out, pod_in, in_b), lat_mid + lat_pa + lat_pb
        return up + middle + down, lat_up + lat_mid + lat_down

    def latencies(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Route latencies (seconds) for arrays of device pairs."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        out = np.zeros(len(src))
        same = self.node_arr[src] == self.node_arr[dst]
        if same.any():
            if self.sw_in is not None and self.sw_out is not None:
                out[same] = self.latency_s[self.sw_in[src[same]]] + self.latency_s[self.sw_out[dst[same]]]
            else:
                out[same] = [self.intra(int(a), int(b))[1] for a, b in zip(src[same], dst[same], strict=True)]
        cross = ~same
        if cross.any():
            a, b = src[cross], dst[cross]
            la, lb = self.leaf_arr[a], self.leaf_arr[b]
            core = np.where(la != lb, self.leaf_lat[la] + self.leaf_lat[lb], 0.0) if len(self.leaf_lat) else 0.0
            if len(self.pod_lat):
                pa, pb = self.leaf_pod[la], self.leaf_pod[lb]
                core = core + np.where(pa != pb, self.pod_lat[pa] + self.pod_lat[pb], 0.0)
            out[cross] = self.up_lat[a] + self.down_lat[b] + core
        return out

    def _index_arrays(self) -> None:
        """numpy views of the per-device paths for vectorized load accumulation."""
        spec, n = self.spec, self.spec.num_gpus
        self.node_arr = np.arange(n, dtype=np.int64) // spec.gpus_per_node
        self.sw_in: np.ndarray | None = None
        self.sw_out: np.ndarray | None = None
        if spec.intra_node == "nvswitch":
            gpus = [naming.gpu(spec.node_of(d), spec.local_of(d)) for d in range(n)]
            switches = [naming.nvswitch(spec.node_of(d)) for d in range(n)]
            self.sw_in = np.array([self._eid[(g, w)] for g, w in zip(gpus, switches, strict=True)])
            self.sw_out = np.array([self._eid[(w, g)] for g, w in zip(gpus, switches, strict=True)])
        self.nic_arr = np.asarray(self.nic_of_device, dtype=np.int64)
        self.leaf_arr = np.asarray(self.leaf_of_device, dtype=np.int64)
        self.up_len = np.array([len(p) for p, _ in self._up], dtype=np.int64)
        self.up_flat = np.array([e for p, _ in self._up for e in p], dtype=np.int64)
        self.up_lat = np.array([lat for _, lat in self._up])
        self.down_len = np.array([len(p) for p, _ in self._down], dtype=np.int64)
        self.down_flat = np.array([e for p, _ in self._down for e in p], dtype=np.int64)
        self.down_lat = np.array([lat for _, lat in self._down])
        links = [self._leaf_links[i] for i in range(len(self._leaf_links))]
        self.leaf_out = np.array([o for o, _, _ in links], dtype=np.int64)
        self.leaf_in = np.array([i for _, i, _ in links], dtype=np.int64)
        self.leaf_lat = np.array([lat for _, _, lat in links])
        self.leaf_pod = np.array([self._pod_of_leaf.get(i, 0) for i in range(len(self._leaf_links))],
                                 dtype=np.int64)
        pods = [self._pod_links[i] for i in range(len(self._pod_links))]
        self.pod_out = np.array([o for o, _, _ in pods], dtype=np.int64)
        self.pod_in = np.array([i for _, i, _ in pods], dtype=np.int64)
        self.pod_lat = np.array([lat for _, _, lat in pods])

    def _index_fabric_paths(self) -> None:
        """Per device: edges to/from its leaf; per leaf: its uplink pair (if there is a core)."""
        s = self.spec
        leaf_ids: dict[str, int] = {}
        for device in range(s.num_gpus):
            node, local = s.node_of(device), s.local_of(device)
            nic = s.nic_of_local(local)
            self.nic_of_device.append(nic)
            leaf = naming.leaf(*s.leaf_of(node, nic), s.fabric == "rail-optimized")
            path = self._to_nic_vertices(node, local) + [leaf]
            up = self.edges_of(path)
            down = self.edges_of(path[::-1])
            self._up.append((up, float(sum(self.latency_s[e] for e in up))))
            self._down.append((down, float(sum(self.latency_s[e] for e in down))))
            self.leaf_of_device.append(leaf_ids.setdefault(leaf, len(leaf_ids)))
        if s.num_pods:
            self._index_pods(leaf_ids)
        elif naming.CORE in self.vertex_attrs:
            for leaf, index in leaf_ids.items():
                out, back = self._eid[(leaf, naming.CORE)], self._eid[(naming.CORE, leaf)]
                self._leaf_links[index] = (out, back, float(self.latency_s[out]))

    def _index_pods(self, leaf_ids: dict[str, int]) -> None:
        """Three tiers: each leaf's links to its pod, each pod's links to the core."""
        s = self.spec
        for leaf, index in leaf_ids.items():
            pod = s.pod_of_block(int(self.vertex_attrs[leaf]["block"]))
            up = naming.pod(pod)
            out, back = self._eid[(leaf, up)], self._eid[(up, leaf)]
            self._leaf_links[index] = (out, back, float(self.latency_s[out]))
            self._pod_of_leaf[index] = pod
        if naming.CORE in self.vertex_attrs:
            for pod in range(s.num_pods):
                up = naming.pod(pod)
                out, back = self._eid[(up, naming.CORE)], self._eid[(naming.CORE, up)]
                self._pod_links[pod] = (out, back, float(self.latency_s[out]))
