"""Collective cost model: NCCL alpha-beta semantics with the nccl-tests bus bandwidth.

time = the device's collective_overhead_s (NCCL call) + latency (steps x per-hop latency along the
routes) + S x max over the links the group uses
of (bytes on the link per byte of S, summed over the group and its ``concurrent`` peers) /
(bandwidth x efficiency). algbw = S / time; busbw = algbw x the nccl-tests factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, p2p 1).
Sources: NVIDIA/nccl-tests doc/PERFORMANCE.md (hardware-facts 1.1). Sizes in bytes, times in s,
bandwidths in GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from topo import algorithms as alg
from topo.cluster import ClusterSpec
from topo.errors import invalid, require_choice
from topo.loads import LinkLoads
from topo.routing import Router

Fill = Callable[[LinkLoads, Router, np.ndarray], float]

ALGORITHMS: dict[str, dict[str, Fill]] = {
    "all_reduce": {"ring": alg.fill_ring_all_reduce, "tree": alg.fill_tree_all_reduce,
                   "hierarchical": alg.fill_hierarchical_all_reduce,
                   "nvls": alg.fill_nvls_all_reduce},
    "all_gather": {"ring": alg.fill_ring_gather},
    "reduce_scatter": {"ring": alg.fill_ring_gather},
    "broadcast": {"ring": alg.fill_ring_broadcast},
    "all_to_all": {"direct": alg.fill_all_to_all},
    "p2p": {"direct": alg.fill_p2p},
}
OPS = tuple(op for op in ALGORITHMS if op != "p2p")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` on ``n`` ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveCost:
    """Predicted cost of one collective on one group.

    Attributes:
        time_s: duration, seconds.  algorithm: the algorithm used ("none" for an empty
            collective, "ideal" on an ideal network).  busbw_GBps, algbw_GBps: nccl-tests
            bandwidths, GB/s (0.0 when time_s is 0).  bottleneck: the link that limits the
            bandwidth term, in words.
    """

    time_s: float
    algorithm: str
    busbw_GBps: float
    algbw_GBps: float
    bottleneck: str


@dataclass(frozen=True)
class _Unit:
    """Size-independent part of a cost: t(S) = latency_s + S * seconds_per_byte."""

    latency_s: float
    seconds_per_byte: float
    bottleneck: str


class CollectiveModel:
    """Costs collectives on a cluster; results are cached per (op, algorithm, group structure).

    ``ideal=True`` models an ideal network: every communication costs 0 (no graph is built).
    """

    def __init__(self, cluster: ClusterSpec, graph: nx.Graph | None = None, *,
                 ideal: bool = False) -> None:
        self.cluster = cluster
        self.ideal = ideal
        self._graph = graph
        self._router: Router | None = None
        self._inputs: dict[tuple, tuple[int, int]] = {}  # raw arguments -> (group size, structure)
        self._structures: dict[tuple, int] = {}  # canonical (group, others) -> structure id
        self._groups: list[tuple] = []  # structure id -> canonical (group, others)
        self._units: dict[tuple[str, str, int], _Unit] = {}

    @property
    def router(self) -> Router:
        """The router (built with the graph on first use)."""
        if self._router is None:
            self._router = Router(self.cluster, self._graph)
        return self._router

    @staticmethod
    def algorithms(op: str) -> tuple[str, ...]:
        """Algorithms the model knows for ``op`` (whether each applies depends on the group)."""
        require_choice("op", op, ALGORITHMS)
        return tuple(ALGORITHMS[op])

    def collective(self, op: str, size_bytes: float, devices: Iterable[int], *,
                   concurrent: Iterable[Iterable[int]] = (), algorithm: str = "auto") -> CollectiveCost:
        """Cost of ``op`` on ``devices`` (global ids) while ``concurrent`` groups run the same op."""
        require_choice("op", op, OPS)
        raw = (op, tuple(devices), tuple(map(tuple, concurrent)))
        if raw not in self._inputs:
            group = self._group(raw[1])
            others = tuple(sorted({g for g in map(self._group, raw[2]) if g != group}))
            self._inputs[raw] = (len(group), self._structure(group, others))
        return self._cost(op, size_bytes, *self._inputs[raw], algorithm)

    def p2p(self, size_bytes: float, src: int, dst: int, *,
            concurrent: Iterable[tuple[int, int]] = ()) -> CollectiveCost:
        """Cost of sending ``size_bytes`` from ``src`` to ``dst`` while ``concurrent`` pairs send."""
        raw = ("p2p", (src, dst), tuple(map(tuple, concurrent)))
        if raw not in self._inputs:
            pair = self._pair((src, dst))
            others = tuple(sorted({p for p in map(self._pair, raw[2]) if p != pair}))
            self._inputs[raw] = (len(set(pair)), self._structure(pair, others))
        return self._cost("p2p", size_bytes, *self._inputs[raw], "direct")

    # ---- internals ----
    def _group(self, devices: Iterable[int]) -> tuple[int, ...]:
        group = tuple(sorted(self._device(d) for d in devices))
        if len(set(group)) != len(group):
            raise invalid("devices", group, "device ids must be distinct")
        return group

    def _pair(self, pair: Iterable[int]) -> tuple[int, int]:
        src, dst = tuple(pair)
        return self._device(src), self._device(dst)

    def _device(self, d: Any) -> int:
        """A valid global device id as a Python int (numpy integers are accepted)."""
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not 0 <= int(d) < self.cluster.num_gpus:
            raise invalid("device", d, f"expected an int in [0, {self.cluster.num_gpus})")
        return int(d)

    def _cost(self, op: str, size: float, n: int, structure: int, algorithm: str) -> CollectiveCost:
        if isinstance(size, bool) or not isinstance(size, int | float) or not size >= 0:
            raise invalid("size_bytes", size, "expected a number >= 0")
        choices = ALGORITHMS[op]
        require_choice("algorithm", algorithm, ("auto", *choices))
        if n < 2 or size == 0:
            return CollectiveCost(0.0, "none", 0.0, 0.0, "")
        if self.ideal:
            return CollectiveCost(0.0, "ideal", 0.0, 0.0, "ideal network")
        names = tuple(choices) if algorithm == "auto" else (algorithm,)
        best: tuple[float, str, _Unit] | None = None
        for name in names:
            try:
                unit = self._unit(op, name, structure)
            except alg.NotApplicable:
                if algorithm != "auto":
                    raise
                continue
            t = self.cluster.device.collective_overhead_s + unit.latency_s + size * unit.seconds_per_byte
            if best is None or t < best[0]:
                best = (t, name, unit)
        assert best is not None  # ring (or direct) always applies
        t, name, unit = best
        algbw = size / t / 1e9
        return CollectiveCost(t, name, algbw * bus_factor(op, n), algbw, unit.bottleneck)

    def _unit(self, op: str, name: str, structure: int) -> _Unit:
        key = (op, name, structure)
        unit = self._units.get(key)
        if unit is None:
            unit = self._compute(ALGORITHMS[op][name], *self._groups[structure])
            self._units[key] = unit
        return unit

    def _structure(self, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]) -> int:
        """Id of the group structure: devices shifted down by whole leaf blocks (the fabric is
        identical under such shifts), so equivalent groups share cached results."""
        spec = self.cluster
        lowest = min(min(g) for g in (group, *others)) // spec.gpus_per_node
        shift = lowest // spec.nodes_per_leaf * spec.nodes_per_leaf * spec.gpus_per_node
        if shift:
            group = tuple(d - shift for d in group)
            others = tuple(tuple(d - shift for d in g) for g in others)
        key = (group, others)
        if key not in self._structures:
            self._structures[key] = len(self._groups)
            self._groups.append(key)
        return self._structures[key]

    def _compute(self, fill: Fill, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]) -> _Unit:
        router = self.router
        mine = LinkLoads(router)
        latency = fill(mine, router, np.asarray(group))
        focal = mine.totals()
        rest = LinkLoads(router)
        for g in self._relevant(group, others):
            fill(rest, router, np.asarray(g))
        used = np.flatnonzero(focal)
        if not len(used):
            return _Unit(latency, 0.0, "")
        total = focal[used] + rest.totals()[used]
        per_byte = total * router.seconds_per_byte[used]
        worst = int(np.argmax(per_byte))
        return _Unit(latency, float(per_byte[worst]), self._describe(int(used[worst]), total[worst]))

    def _relevant(self, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]) -> list[tuple[int, ...]]:
        """The concurrent groups that can load a link of ``group``: those with a member on one of
        its nodes (intra-node, PCIe and NIC links) or under one of its leaves (leaf<->core links)."""
        gpn, leaf_of = self.cluster.gpus_per_node, self.router.leaf_of_device
        nodes = {d // gpn for d in group}
        leaves = {leaf_of[d] for d in group}
        return [g for g in others
                if any(d // gpn in nodes or leaf_of[d] in leaves for d in g)]

    def _describe(self, edge: int, load: float) -> str:
        """Words for a bottleneck edge, free of node numbers (results are shared across shifts)."""
        router = self.router
        tail, head = router.ends[edge]
        data = router.edge_attrs[edge // 2]
        kinds = f"{router.vertex_attrs[tail]['kind']}->{router.vertex_attrs[head]['kind']}"
        achievable = data["bandwidth_GBps"] * data["efficiency"]
        return (f"{kinds} {data['link']} ({achievable:.1f} GB/s achievable) carrying "
                f"{load:.3g} bytes per byte of S")
