"""Traffic patterns of NCCL's collective algorithms, per byte of the collective's size S.

Each ``fill_*`` function adds one group's transfers to a :class:`topo.loads.LinkLoads` (as
coefficients of S) and returns the algorithm's latency term in seconds. Conventions follow
nccl-tests (hardware-facts 1.1): all_reduce/broadcast S = per-rank buffer; all_gather and
reduce_scatter S = the full array; all_to_all S = per-rank send buffer. All stages of an algorithm
are assumed pipelined (NCCL splits buffers into chunks), so its time is latency + S * (max over
links of load / achievable bandwidth).

Ring order is the members sorted by device id (node-major, as NCCL's topology search tends to
produce). A hop between nodes is striped over the NICs of the group's members on both nodes
(NCCL runs one channel per NIC): the group's largest per-node NIC count r sets the number of
stripes, each node cycling over its own NICs; each stripe goes GPU -> its closest NIC -> ... -> peer.
"""

from __future__ import annotations

import numpy as np

from topo.loads import LinkLoads
from topo.routing import Router

Members = np.ndarray


class NotApplicable(ValueError):
    """The algorithm cannot run on this group (the message says why)."""


def _nic_reps(router: Router, ring: Members) -> tuple[np.ndarray, np.ndarray]:
    """(group's nodes ascending, R) where R[i, j] = the j-th NIC representative of node i.

    A representative is the lowest member using a NIC; rows are padded by cycling.
    """
    node, nic = router.node_arr[ring], router.nic_arr[ring]
    _, first = np.unique(node * (router.spec.gpus_per_node + 1) + nic, return_index=True)
    rep_dev, rep_node = ring[first], node[first]
    nodes, start, count = np.unique(rep_node, return_index=True, return_counts=True)
    j = np.arange(count.max())
    return nodes, rep_dev[start[:, None] + j[None, :] % count[:, None]]


def _stripes(loads: LinkLoads, router: Router, reps: np.ndarray, ia: np.ndarray, ib: np.ndarray,
             coef: float) -> float:
    """Hops from node rows ``ia`` to node rows ``ib`` of ``reps``, each split into stripes."""
    src, dst = reps[ia].ravel(), reps[ib].ravel()
    loads.add(src, dst, coef / reps.shape[1])
    return float(router.latencies(src, dst).max())


def _ring(loads: LinkLoads, router: Router, members: Members, coef: float, wrap: bool = True) -> float:
    """Every ring hop carries ``coef`` * S; returns the slowest hop's latency."""
    ring = np.sort(np.asarray(members, dtype=np.int64))
    a, b = ring, np.roll(ring, -1)
    if not wrap:
        a, b = a[:-1], b[:-1]
    node = router.node_arr
    same = node[a] == node[b]
    latency = 0.0
    if same.any():
        loads.add(a[same], b[same], coef)
        latency = float(router.latencies(a[same], b[same]).max())
    if not same.all():
        nodes, reps = _nic_reps(router, ring)
        ia, ib = np.searchsorted(nodes, node[a[~same]]), np.searchsorted(nodes, node[b[~same]])
        latency = max(latency, _stripes(loads, router, reps, ia, ib, coef))
    return latency


def fill_ring_all_reduce(loads: LinkLoads, router: Router, members: Members) -> float:
    """Ring all-reduce: 2(n-1) steps of S/n per hop (reduce-scatter then all-gather)."""
    n = len(members)
    return 2 * (n - 1) * _ring(loads, router, members, 2 * (n - 1) / n)


def fill_ring_gather(loads: LinkLoads, router: Router, members: Members) -> float:
    """Ring all-gather or reduce-scatter of a full array S: n-1 steps of S/n per hop."""
    n = len(members)
    return (n - 1) * _ring(loads, router, members, (n - 1) / n)


def fill_ring_broadcast(loads: LinkLoads, router: Router, members: Members) -> float:
    """Pipelined chain from the lowest device: every hop but the wrap carries S."""
    n = len(members)
    return (n - 1) * _ring(loads, router, members, 1.0, wrap=False)


def _btree_parent(r: np.ndarray, m: int) -> np.ndarray:
    """NCCL's in-order binary tree over m nodes (src/graph/trees.cc, ``ncclGetBtree``): node r > 0
    clears its lowest set bit and sets the next one; past the end it just clears it."""
    bit = r & -r
    up = (r ^ bit) | (bit << 1)
    return np.where(up >= m, r ^ bit, up)


def _double_binary_tree(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(child, parent) node positions of NCCL's two complementary trees over m nodes: a btree and
    its mirror (m even) or its shift by one (m odd) (``ncclGetDtree``)."""
    r = np.arange(1, m)
    up = _btree_parent(r, m)
    if m % 2 == 0:
        child2, parent2 = m - 1 - r, m - 1 - up
    else:
        child2, parent2 = (r + 1) % m, (up + 1) % m
    return np.concatenate([r, child2]), np.concatenate([up, parent2])


def fill_tree_all_reduce(loads: LinkLoads, router: Router, members: Members) -> float:
    """NCCL tree: a chain inside each node, a double binary tree across nodes.

    Each tree carries S/2 up (reduce) and S/2 down (broadcast); both use the same intra-node
    chain, so every chain link carries S each way. Latency 2*((k-1)*a_chain + log2(m)*a_net).
    """
    ring = np.sort(np.asarray(members, dtype=np.int64))
    node = router.node_arr[ring]
    link = node[:-1] == node[1:]
    a, b = ring[:-1][link], ring[1:][link]
    chain_latency = 0.0
    if len(a):
        loads.add(b, a, 1.0)
        loads.add(a, b, 1.0)
        chain_latency = float(max(router.latencies(a, b).max(), router.latencies(b, a).max()))
    nodes, reps = _nic_reps(router, ring)
    m, k = len(nodes), int(np.unique(node, return_counts=True)[1].max())
    net_latency = 0.0
    if m > 1:
        child, parent = _double_binary_tree(m)
        net_latency = max(_stripes(loads, router, reps, child, parent, 0.5),
                          _stripes(loads, router, reps, parent, child, 0.5))
    depth = int(np.log2(m)) if m > 1 else 0
    return 2 * ((k - 1) * chain_latency + depth * net_latency)


def _uniform_grid(router: Router, members: Members, algorithm: str) -> np.ndarray:
    """Members as an (m nodes, k per node) array; NotApplicable unless every node has k >= 2."""
    ring = np.sort(np.asarray(members, dtype=np.int64))
    counts = np.unique(router.node_arr[ring], return_counts=True)[1]
    if counts.min() != counts.max():
        raise NotApplicable(f"{algorithm} needs the same number of group members on every node")
    if counts[0] < 2:
        raise NotApplicable(f"{algorithm} needs at least 2 group members per node")
    return ring.reshape(len(counts), int(counts[0]))


def _inter_node_all_reduce(loads: LinkLoads, router: Router, grid: np.ndarray) -> float:
    """Ring all-reduce of S/k among the members with the same position on every node."""
    m, k = grid.shape
    if m == 1:
        return 0.0
    a, b = grid.ravel(), np.roll(grid, -1, axis=0).ravel()
    loads.add(a, b, 2 * (m - 1) / m / k)
    return 2 * (m - 1) * float(router.latencies(a, b).max())


def fill_hierarchical_all_reduce(loads: LinkLoads, router: Router, members: Members) -> float:
    """Intra-node reduce-scatter, inter-node all-reduce of each shard, intra-node all-gather."""
    grid = _uniform_grid(router, members, "hierarchical")
    m, k = grid.shape
    if m < 2:
        raise NotApplicable("hierarchical needs group members on at least 2 nodes")
    a, b = grid.ravel(), np.roll(grid, -1, axis=1).ravel()
    loads.add(a, b, 2 * (k - 1) / k)
    intra = float(router.latencies(a, b).max())
    return 2 * (k - 1) * intra + _inter_node_all_reduce(loads, router, grid)


def _nvls_grid(router: Router, members: Members, algorithm: str) -> np.ndarray:
    """Members as a (nodes, per node) grid; NotApplicable without NVLS hardware."""
    spec, nvlink = router.spec, router.spec.nvlink
    if nvlink is None or nvlink.nvls_efficiency <= 0.0 or router.sw_in is None or router.sw_out is None:
        raise NotApplicable(f"{algorithm} needs NVSwitch gen3+ (an nvlink with nvls_efficiency > 0); "
                            f"cluster {spec.name!r} has none")
    return _uniform_grid(router, members, algorithm)


def _nvls_loads(loads: LinkLoads, router: Router, grid: np.ndarray) -> float:
    """In-switch reduction on every node: each GPU sends S (its data read by the reductions) +
    S/k (its reduced chunk) and receives S/k + S, i.e. S*(k+1)/k each way, at the NVLink's
    ``nvls_efficiency``. Returns the two switch hops' latency."""
    nvlink = router.spec.nvlink
    assert nvlink is not None and router.sw_in is not None and router.sw_out is not None
    k = grid.shape[1]
    coef = (k + 1) / k * nvlink.efficiency / nvlink.nvls_efficiency
    loads.add_edges(router.sw_in[grid.ravel()], coef)
    loads.add_edges(router.sw_out[grid.ravel()], coef)
    return 2 * float(router.latencies(grid[0, :1], grid[0, 1:2])[0])


def fill_nvls_all_reduce(loads: LinkLoads, router: Router, members: Members) -> float:
    """NVLink SHARP inside each node (+ the inter-node all-reduce of hierarchical across nodes;
    NCCL itself runs NVLS on one node only and ``nvls_tree`` across nodes)."""
    grid = _nvls_grid(router, members, "nvls")
    return _nvls_loads(loads, router, grid) + _inter_node_all_reduce(loads, router, grid)


def fill_nvls_tree_all_reduce(loads: LinkLoads, router: Router, members: Members) -> float:
    """NCCL's NVLS tree: NVLS reduce-scatter / all-gather inside each node; GPU j of every node
    all-reduces the j-th 1/k of S with GPU j of the other nodes over a double binary tree (each
    tree carries half of the shard up and down)."""
    grid = _nvls_grid(router, members, "nvls_tree")
    m, k = grid.shape
    if m < 2:
        raise NotApplicable("nvls_tree needs group members on at least 2 nodes")
    hops = _nvls_loads(loads, router, grid)
    child, parent = _double_binary_tree(m)
    src, dst = grid[child].ravel(), grid[parent].ravel()
    loads.add(src, dst, 0.5 / k)
    loads.add(dst, src, 0.5 / k)
    net = float(max(router.latencies(src, dst).max(), router.latencies(dst, src).max()))
    return hops + 2 * int(np.log2(m)) * net


def fill_all_to_all(loads: LinkLoads, router: Router, members: Members) -> float:
    """Every member sends S/n to every other member at once (NCCL: grouped send/recv).

    Cross-node traffic is aggregated per device (up/down paths) and per leaf (core links), so
    a 16k-rank all-to-all stays cheap. Latency: the slowest single route (one step).
    """
    ring = np.sort(np.asarray(members, dtype=np.int64))
    n, node = len(ring), router.node_arr[ring]
    nodes, start, count = np.unique(node, return_index=True, return_counts=True)
    pairs = [(np.repeat(g, len(g)), np.tile(g, len(g))) for g in np.split(ring, start[1:])]
    a, b = np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])
    a, b = a[a != b], b[a != b]
    latency = 0.0
    if len(a):
        loads.add(a, b, 1.0 / n)
        latency = float(router.latencies(a, b).max())
    if len(nodes) == 1:
        return latency
    on_node = count[np.searchsorted(nodes, node)]
    loads.add_uplinks(ring, (n - on_node) / n)
    loads.add_downlinks(ring, (n - on_node) / n)
    leaf = router.leaf_arr[ring]
    per_leaf = np.bincount(leaf)[leaf]
    _, inverse, per_node_leaf = np.unique(node * (leaf.max() + 1) + leaf, return_inverse=True,
                                          return_counts=True)
    off_leaf = n - per_leaf - (on_node - per_node_leaf[inverse])
    far = off_leaf > 0
    core = 0.0
    if far.any():
        loads.add_core(leaf[far], off_leaf[far] / n, off_leaf[far] / n)
        core = 2 * float(router.leaf_lat[leaf[far]].max())
    if len(router.pod_out):
        pod = router.leaf_pod[leaf]
        off_pod = n - np.bincount(pod)[pod]
        apart = off_pod > 0
        if apart.any():
            loads.add_pods(pod[apart], off_pod[apart] / n, off_pod[apart] / n)
            core += 2 * float(router.pod_lat[pod[apart]].max())
    return max(latency, float(router.up_lat[ring].max()) + core + float(router.down_lat[ring].max()))


def fill_p2p(loads: LinkLoads, router: Router, members: Members) -> float:
    """A send of S bytes from ``members[0]`` to ``members[1]`` (order matters)."""
    src, dst = int(members[0]), int(members[1])
    loads.add(src, dst, 1.0)
    return float(router.latencies(np.array([src]), np.array([dst]))[0])
