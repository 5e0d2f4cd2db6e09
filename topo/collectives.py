"""Collective cost model: NCCL's algorithms and protocols over the links the group uses.

Bandwidth: S x max over the links the group uses of (bytes on the link per byte of S, summed over
the group and its ``concurrent`` peers) / (bandwidth x efficiency) (:mod:`topo.algorithms`,
:mod:`topo.loads`). On a CUDA device (``compute_capability`` > 0) each NCCL algorithm (ring, tree,
NVLS on one node, NVLS tree across nodes) x protocol (LL, LL128, Simple) then gets NCCL's tuner
latency and protocol shares, NCCL's own estimate selects one as NCCL does, and the chunk pipeline
of the chosen one stretches its bandwidth term (:mod:`topo.nccl_model`); NCCL's base latency is
the call's fixed cost. Otherwise (all_to_all, p2p, CPU processes, or ``compute_capability`` 0) the
plain alpha-beta model applies: the device's collective_overhead_s + steps x the routes' hop
latencies. algbw = S / time;
busbw = algbw x the nccl-tests factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter,
all_to_all (n-1)/n; broadcast, p2p 1). :meth:`CollectiveModel.flows` decomposes a collective
into NCCL's point-to-point flows (:mod:`topo.flows`) for a flow-level engine. Sizes in bytes,
times in s, bandwidths in GB/s.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import invalid, require_choice
from core.vocab import Collective, OpClass
from topo import algorithms as alg
from topo.cluster import ClusterSpec
from topo.collective_ops import OPS, bus_factor
from topo.flows import Flow, collective_flows
from topo.group_layout import group_layout
from topo.link_unit import Fill, Unit, link_unit
from topo.nccl_model import NCCL_ALGORITHMS, PROTOCOLS, Candidate, Layout, candidates
from topo.nccl_tuning import get_nccl_tuning
from topo.routing import Router

if TYPE_CHECKING:
    import networkx as nx  # annotations only: importing it costs every simulation ~50 ms


ALGORITHMS: dict[str, dict[str, Fill]] = {
    Collective.ALL_REDUCE: {"ring": alg.fill_ring_all_reduce, "tree": alg.fill_tree_all_reduce,
                   "hierarchical": alg.fill_hierarchical_all_reduce,
                   "nvls": alg.fill_nvls_all_reduce, "nvls_tree": alg.fill_nvls_tree_all_reduce},
    Collective.ALL_GATHER: {"ring": alg.fill_ring_gather},
    Collective.REDUCE_SCATTER: {"ring": alg.fill_ring_gather},
    Collective.BROADCAST: {"ring": alg.fill_ring_broadcast},
    Collective.ALL_TO_ALL: {"direct": alg.fill_all_to_all},
    OpClass.P2P: {"direct": alg.fill_p2p},
}
ANALYTIC_AUTO: dict[str, tuple[str, ...]] = {Collective.ALL_REDUCE: ("ring", "tree", "hierarchical", "nvls")}  # pre-NCCL-model choices

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "CollectiveCost", "CollectiveModel", "bus_factor"]


@dataclass(frozen=True)
class CollectiveCost:
    """Predicted cost of one collective on one group.

    Attributes:
        time_s: duration, seconds.  algorithm: the algorithm used ("none" for an empty
            collective, "ideal" on an ideal network).  busbw_GBps, algbw_GBps: nccl-tests
            bandwidths, GB/s (0.0 when time_s is 0).  bottleneck: the link that limits the
            bandwidth term, in words.  protocol: NCCL protocol (LL, LL128, Simple), "" outside
            NCCL's model.  channels: CTAs the NCCL kernel runs (one per channel, each holding
            an SM while it runs; :mod:`topo.interference`), 0 outside NCCL's model.
    """

    time_s: float
    algorithm: str
    busbw_GBps: float
    algbw_GBps: float
    bottleneck: str
    protocol: str = ""
    channels: int = 0


class CollectiveModel:
    """Costs collectives on a cluster; results are cached per (op, algorithm, group structure).

    ``ideal=True`` models an ideal network: every communication costs 0 (no graph is built).
    """

    def __init__(self, cluster: ClusterSpec, graph: nx.Graph | None = None, *,
                 ideal: bool = False) -> None:
        self.cluster = cluster
        self.ideal = ideal
        self.tuning = get_nccl_tuning(cluster.nccl_version)
        self._graph = graph
        self._router: Router | None = None
        self._inputs: dict[tuple, tuple[int, int]] = {}  # raw arguments -> (group size, structure)
        self._structures: dict[tuple, int] = {}  # canonical (group, others) -> structure id
        self._groups: list[tuple] = []  # structure id -> canonical (group, others)
        self._units: dict[tuple[str, str, int], Unit] = {}
        self._layouts: dict[int, Layout | None] = {}
        self._candidates: dict[tuple[str, int], list[tuple[Candidate, str]]] = {}

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
                   concurrent: Iterable[Iterable[int]] = (), algorithm: str = "auto",
                   protocol: str = "auto") -> CollectiveCost:
        """Cost of ``op`` on ``devices`` (global ids) while ``concurrent`` groups run the same op.

        ``algorithm`` / ``protocol`` force NCCL's choice (as NCCL_ALGO / NCCL_PROTO do).
        """
        require_choice("op", op, OPS)
        n, structure = self._resolve(op, devices, concurrent)
        return self._cost(op, size_bytes, n, structure, algorithm, protocol)

    def p2p(self, size_bytes: float, src: int, dst: int, *,
            concurrent: Iterable[tuple[int, int]] = ()) -> CollectiveCost:
        """Cost of sending ``size_bytes`` from ``src`` to ``dst`` while ``concurrent`` pairs send."""
        raw = ("p2p", (src, dst), tuple(map(tuple, concurrent)))
        if raw not in self._inputs:
            pair = self._pair((src, dst))
            others = tuple(sorted({p for p in map(self._pair, raw[2]) if p != pair}))
            self._inputs[raw] = (len(set(pair)), self._structure(pair, others))
        return self._cost("p2p", size_bytes, *self._inputs[raw], "direct", "auto")

    def flows(self, op: str, size_bytes: float, devices: Iterable[int], *,
              algorithm: str = "auto") -> list[Flow]:
        """The point-to-point flows NCCL would run for ``op`` (see :mod:`topo.flows`).

        ``algorithm="auto"`` decomposes the algorithm :meth:`collective` selects.
        """
        group = self._group(devices)
        if algorithm == "auto":
            algorithm = self.collective(op, size_bytes, group).algorithm
        return collective_flows(self, op, float(size_bytes), group, algorithm)

    def layout(self, devices: Iterable[int]) -> Layout | None:
        """What NCCL's model sees of a group (None outside NCCL's model)."""
        return group_layout(self.cluster, self.router, self.tuning, np.asarray(self._group(devices)))

    # ---- internals: arguments ----
    def _resolve(self, op: str, devices: Iterable[int], concurrent: Iterable[Iterable[int]]) -> tuple[int, int]:
        raw = (op, tuple(devices), tuple(map(tuple, concurrent)))
        if raw not in self._inputs:
            group = self._group(raw[1])
            others = tuple(sorted({g for g in map(self._group, raw[2]) if g != group}))
            self._inputs[raw] = (len(group), self._structure(group, others))
        return self._inputs[raw]

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

    # ---- internals: pricing ----
    def _cost(self, op: str, size: float, n: int, structure: int, algorithm: str,
              protocol: str) -> CollectiveCost:
        if isinstance(size, bool) or not isinstance(size, int | float) or not size >= 0:
            raise invalid("size_bytes", size, "expected a number >= 0")
        require_choice("algorithm", algorithm, ("auto", *ALGORITHMS[op]))
        require_choice("protocol", protocol, ("auto", *PROTOCOLS))
        if n < 2 or size == 0:
            return CollectiveCost(0.0, "none", 0.0, 0.0, "")
        if self.ideal:
            return CollectiveCost(0.0, "ideal", 0.0, 0.0, "ideal network")
        nccl = op in NCCL_ALGORITHMS and self._layout(structure) is not None
        if nccl and (algorithm == "auto" or algorithm in NCCL_ALGORITHMS[op]):
            return self._nccl_cost(op, size, n, structure, algorithm, protocol)
        if protocol not in ("auto", "Simple"):
            raise invalid("protocol", protocol, f"outside NCCL's model only Simple applies ({op}/{algorithm})")
        return self._analytic_cost(op, size, n, structure, algorithm)

    def _nccl_cost(self, op: str, size: float, n: int, structure: int, algorithm: str,
                   protocol: str) -> CollectiveCost:
        """NCCL's choice (its own estimate) among the applicable candidates, priced by our model."""
        pool = [(c, b) for c, b in self._nccl_candidates(op, structure)
                if algorithm in ("auto", c.algorithm) and protocol in ("auto", c.protocol)]
        if not pool:
            raise invalid("algorithm", f"{algorithm}/{protocol}", f"does not apply to this {op} group")
        chosen, bottleneck = min(pool, key=lambda cb: cb[0].estimate(size))
        t = chosen.time(size)  # NCCL's base latency is the call's fixed cost
        algbw = size / t / 1e9
        return CollectiveCost(t, chosen.algorithm, algbw * bus_factor(op, n), algbw, bottleneck,
                              chosen.protocol, chosen.channels(size))

    def _analytic_cost(self, op: str, size: float, n: int, structure: int, algorithm: str) -> CollectiveCost:
        """Alpha-beta: overhead + steps x hop latencies + S x seconds per byte, the fastest."""
        names = ANALYTIC_AUTO.get(op, tuple(ALGORITHMS[op])) if algorithm == "auto" else (algorithm,)
        best: tuple[float, str, Unit] | None = None
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

    def _nccl_candidates(self, op: str, structure: int) -> list[tuple[Candidate, str]]:
        key = (op, structure)
        if key not in self._candidates:
            layout = self._layout(structure)
            assert layout is not None
            link_bw: dict[str, tuple[float, float]] = {}
            bottlenecks: dict[str, str] = {}
            for name in NCCL_ALGORITHMS[op]:
                if name == "nvls" and layout.nodes > 1:
                    continue  # NCCL runs NVLS across nodes only with CollNet (tuning.cc)
                if name in ("nvls", "nvls_tree") and not layout.nvls_channels:
                    continue
                try:
                    unit = self._unit(op, name, structure)
                except alg.NotApplicable:
                    continue
                link_bw[name] = (1.0 / (unit.seconds_per_byte * 1e9),
                                 1.0 / (unit.nccl_seconds_per_byte * 1e9))
                bottlenecks[name] = unit.bottleneck
            found = candidates(self.tuning, op, layout, link_bw)
            self._candidates[key] = [(c, bottlenecks[c.algorithm]) for c in found]
        return self._candidates[key]

    def _layout(self, structure: int) -> Layout | None:
        if structure not in self._layouts:
            group = np.asarray(self._groups[structure][0])
            self._layouts[structure] = group_layout(self.cluster, self.router, self.tuning, group)
        return self._layouts[structure]

    def _unit(self, op: str, name: str, structure: int) -> Unit:
        key = (op, name, structure)
        unit = self._units.get(key)
        if unit is None:
            unit = link_unit(self.router, ALGORITHMS[op][name], *self._groups[structure])
            self._units[key] = unit
        return unit

    def _structure(self, group: tuple[int, ...], others: tuple[tuple[int, ...], ...]) -> int:
        """Id of the group structure: devices shifted down by whole fabric periods (leaf blocks,
        or pods on three tiers; the fabric is identical under such shifts), so equivalent groups
        share cached results."""
        spec = self.cluster
        lowest = min(min(g) for g in (group, *others)) // spec.gpus_per_node
        shift = lowest // spec.period_nodes * spec.period_nodes * spec.gpus_per_node
        if shift:
            group = tuple(d - shift for d in group)
            others = tuple(tuple(d - shift for d in g) for g in others)
        key = (group, others)
        if key not in self._structures:
            self._structures[key] = len(self._groups)
            self._groups.append(key)
        return self._structures[key]
