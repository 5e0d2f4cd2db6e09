"""Decompose a collective into the point-to-point flows NCCL runs (for a flow-level engine).

A :class:`Flow` moves ``bytes`` from one device to another along directed graph edges (ids as in
:mod:`topo.routing`). Flows of the same ``phase`` run at once (NCCL pipelines an algorithm's
steps, so a ring's or a tree's flows all share phase 0); phase k + 1 starts when phase k ends
(the hierarchical algorithm's reduce-scatter, inter-node all-reduce and all-gather). Bytes are
whole-collective totals per flow, so a max-min fair engine can run them as fluid flows.

- ring (all-reduce, all-gather, reduce-scatter, broadcast): every channel is a ring in device
  order; hop a -> b carries its share of 2(n-1)/n S (all-reduce), (n-1)/n S (gathers) or S
  (broadcast, no wrap) split evenly over the channels. A hop between nodes leaves through the
  channel's NIC: the sender's data first crosses NVLink to the GPU next to that NIC (PXN) and
  lands on the same rail on the far node (rail alignment), as NCCL's channels do.
- tree: per channel one of NCCL's two trees; the members of a node form a chain, the nodes a
  binary tree (:func:`topo.algorithms._double_binary_tree`); every edge carries the channel's
  share up (reduce) and down (broadcast).
- nvls: each GPU sends S (k+1)/k to the NVSwitch and receives as much (``kind="nvls"``, at the
  NVLink's nvls_efficiency; the switch side is device -1). nvls_tree adds GPU j's 1/k shard on a
  tree across nodes. hierarchical: phases 0-2 as above. all_to_all: S/n to every other member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.errors import invalid
from core.vocab import Collective
from topo import algorithms as alg

if TYPE_CHECKING:
    from topo.collectives import CollectiveModel

SWITCH = -1


@dataclass(frozen=True)
class Flow:
    """One transfer of a collective.

    Attributes:
        src_device, dst_device: global device ids (-1: the node's NVSwitch, for NVLS).
        bytes: bytes moved over the whole collective.
        edges: directed edge ids from source to destination (topo.routing.Router ids).
        phase: flows of one phase run concurrently; phases run in order.
        channel: NCCL channel index.  kind: "p2p", or "nvls" (runs at the link's NVLS efficiency).
    """

    src_device: int
    dst_device: int
    bytes: float
    edges: tuple[int, ...]
    phase: int = 0
    channel: int = 0
    kind: str = "p2p"


def collective_flows(model: CollectiveModel, op: str, size: float, group: tuple[int, ...],
                     algorithm: str) -> list[Flow]:
    """The flows of ``op`` with ``algorithm`` on sorted ``group`` (see the module docstring)."""
    members = np.asarray(group, dtype=np.int64)
    if len(members) < 2 or size == 0:
        return []
    builder = _FlowBuilder(model, members, size)
    if op == Collective.ALL_TO_ALL:
        return builder.all_to_all()
    if op == Collective.ALL_REDUCE and algorithm in ("tree", "nvls", "nvls_tree", "hierarchical"):
        return getattr(builder, algorithm)()
    if algorithm != "ring":
        raise invalid("algorithm", algorithm, f"no flow decomposition for {op}")
    n = len(members)
    shares: dict[str, float] = {Collective.ALL_REDUCE: 2 * (n - 1) / n, Collective.BROADCAST: 1.0}
    share = shares.get(op, (n - 1) / n)
    return builder.ring(share, wrap=op != Collective.BROADCAST)


class _FlowBuilder:
    """Routes and channel counts of one group; one method per algorithm."""

    def __init__(self, model: CollectiveModel, members: np.ndarray, size: float) -> None:
        self.router = model.router
        self.members = members
        self.size = size
        layout = model.layout(members.tolist())
        self.channels = layout.channels if layout is not None else 1
        self.node = self.router.node_arr[members]

    # ---- routes ----
    def _path(self, src: int, dst: int) -> tuple[int, ...]:
        return self.router.route(src, dst)[0] if src != dst else ()

    def _hop(self, src: int, dst: int, reps: np.ndarray, nodes: np.ndarray, stripe: int) -> tuple[int, ...]:
        """Same node: the direct route. Across nodes: src -> the stripe's NIC GPU (PXN) -> the
        same stripe's GPU on dst's node -> dst."""
        node = self.router.node_arr
        if node[src] == node[dst]:
            return self._path(src, dst)
        ia, ib = np.searchsorted(nodes, [node[src], node[dst]])
        a, b = int(reps[ia, stripe % reps.shape[1]]), int(reps[ib, stripe % reps.shape[1]])
        return self._path(src, a) + self._path(a, b) + self._path(b, dst)

    # ---- algorithms ----
    def ring(self, share: float, wrap: bool = True) -> list[Flow]:
        ring = self.members
        nodes, reps = alg._nic_reps(self.router, ring)
        hops = list(zip(ring, np.roll(ring, -1), strict=True))[: len(ring) if wrap else len(ring) - 1]
        per = share * self.size / self.channels
        return [Flow(int(a), int(b), per, self._hop(int(a), int(b), reps, nodes, c), 0, c)
                for c in range(self.channels) for a, b in hops]

    def tree(self) -> list[Flow]:
        ring = self.members
        nodes, reps = alg._nic_reps(self.router, ring)
        node = self.node
        per = self.size / self.channels
        chain = [(int(a), int(b)) for a, b in zip(ring[:-1], ring[1:], strict=True)
                 if self.router.node_arr[a] == self.router.node_arr[b]]
        child, parent = alg._double_binary_tree(len(nodes))
        half = len(child) // 2
        heads = ring[np.unique(node, return_index=True)[1]]  # first member of each node
        flows = []
        for c in range(self.channels):
            links = list(chain)
            pick = slice(0, half) if c % 2 == 0 else slice(half, None)
            links += [(int(heads[p]), int(heads[q])) for q, p in zip(child[pick], parent[pick], strict=True)]
            for a, b in links:
                flows.append(Flow(b, a, per, self._hop(b, a, reps, nodes, c), 0, c))  # reduce up
                flows.append(Flow(a, b, per, self._hop(a, b, reps, nodes, c), 0, c))  # broadcast down
        return flows

    def _grid(self, name: str) -> np.ndarray:
        return alg._nvls_grid(self.router, self.members, name) if name.startswith("nvls") \
            else alg._uniform_grid(self.router, self.members, name)

    def nvls(self, grid: np.ndarray | None = None) -> list[Flow]:
        grid = self._grid("nvls") if grid is None else grid
        k = grid.shape[1]
        r = self.router
        assert r.sw_in is not None and r.sw_out is not None
        per = self.size * (k + 1) / k
        flows = []
        for gpu in grid.ravel().tolist():
            flows.append(Flow(gpu, SWITCH, per, (int(r.sw_in[gpu]),), kind="nvls"))
            flows.append(Flow(SWITCH, gpu, per, (int(r.sw_out[gpu]),), kind="nvls"))
        return flows

    def nvls_tree(self) -> list[Flow]:
        grid = self._grid("nvls_tree")
        m, k = grid.shape
        child, parent = alg._double_binary_tree(m)
        per = self.size / k / 2  # each of the two trees carries half of GPU j's shard
        flows = self.nvls(grid)
        for j in range(k):
            for q, p in zip(child, parent, strict=True):
                a, b = int(grid[q, j]), int(grid[p, j])
                flows.append(Flow(a, b, per, self._path(a, b), 0, j))
                flows.append(Flow(b, a, per, self._path(b, a), 0, j))
        return flows

    def hierarchical(self) -> list[Flow]:
        grid = self._grid("hierarchical")
        m, k = grid.shape
        if m < 2:
            raise alg.NotApplicable("hierarchical needs group members on at least 2 nodes")
        flows = []
        for phase in (0, 2):  # intra-node reduce-scatter, then all-gather: (k-1)/k S per hop
            for row in grid:
                for a, b in zip(row, np.roll(row, -1), strict=True):
                    flows.append(Flow(int(a), int(b), (k - 1) / k * self.size, self._path(int(a), int(b)), phase))
        for col in grid.T:  # inter-node ring all-reduce of each 1/k shard
            for a, b in zip(col, np.roll(col, -1), strict=True):
                flows.append(Flow(int(a), int(b), 2 * (m - 1) / m * self.size / k,
                                  self._path(int(a), int(b)), 1))
        return flows

    def all_to_all(self) -> list[Flow]:
        n = len(self.members)
        return [Flow(int(a), int(b), self.size / n, self._path(int(a), int(b)))
                for a in self.members for b in self.members if a != b]
