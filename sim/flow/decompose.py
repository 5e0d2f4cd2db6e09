"""A communication task as flows: which bytes cross which links, and the fixed time before.

A collective becomes the flows NCCL would run (:meth:`topo.collectives.CollectiveModel.flows`,
decomposed by :mod:`topo.flows`), a pipeline send one flow along its route. In a folded
simulation a simulated rank stands for its TP/CP/DP peers, which run the same operation at the
same time, so their flows are added too (the groups of the same dimension at the same pipeline
stage, or every peer's send to its counterpart on the receiving stage), and they contend on the
links they share.

The analytic cost of the operation alone, ``T = analytic(S)`` (a hardware profile's measured fit
for the links it uses when there is one, as in analytic mode), splits into a fixed part
``alpha_s = min(T, analytic(1 byte))`` (NCCL's base and per-step latencies, the per-call
overhead) waited before the bytes move, and a bandwidth part ``B = T - alpha_s``. Let ``F`` be how
long the operation's own flows take alone on empty links (max-min fluid). When ``B >= F`` the
analytic model sees less bandwidth than the links offer (NCCL protocol efficiency, per-channel
limits, chunk pipelining); every flow of phase p is then capped at ``bytes / (F_p * B / F)``, the
pace that finishes it in ``B / F`` times its fluid time, as one NCCL channel can drive only so
much. When ``B < F`` there is no cap and ``alpha_s = max(0, T - F)``. Uncontended, flow mode
thus reproduces the analytic time; under contention a flow slows once its fair share falls
below its cap. Offload copies (PCIe to and from CPU DRAM, NVMe reads and writes) are flows on
their own links with no latency part or pace (:mod:`sim.flow.host_copies`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.groups import PP
from core.taskgraph import Op, Task
from core.vocab import COLLECTIVE_OPS, Kind
from sim.flow.fluid import phase_times_s
from sim.flow.host_copies import HOST_COPY_CLASSES, host_copy_vertices
from sim.flow.maxmin import Incidence, incidence_of
from sim.pricing import TaskCoster
from topo.flows import Flow, collective_flows

Phase = tuple[Incidence, np.ndarray]  # flows' links and their bytes
Paced = tuple[Incidence, np.ndarray, np.ndarray]  # a Phase plus per-flow rate caps (bytes/s)


@dataclass(frozen=True)
class OpFlows:
    """How one op runs in flow mode: ``alpha_s`` seconds, then each phase's flows in turn."""

    alpha_s: float
    phases: tuple[Paced, ...] = ()


class FlowPlanner:
    """Turns communication ops into :class:`OpFlows` for one job (cached per op shape)."""

    def __init__(self, coster: TaskCoster, *, folded: bool) -> None:
        self.coster = coster
        self.model = coster.collectives
        self.router = self.model.router
        self.folded = folded
        self.capacity_Bps = 1.0 / self.router.seconds_per_byte
        self._pp = coster.placement.coordinate_array("pp")
        self._cache: dict[tuple[object, ...], OpFlows] = {}

    def plan(self, op: Op, task: Task) -> OpFlows:
        """Flows of ``op`` of ``task`` (a fixed delay only when the op is not network traffic)."""
        key = (op.op_class, op.bytes, op.dim, op.duration_s, task.rank, task.peer, task.kind)
        if key not in self._cache:
            self._cache[key] = self._plan(op, task)
        return self._cache[key]

    def _plan(self, op: Op, task: Task) -> OpFlows:
        fixed = OpFlows(self.coster.op_duration(op, task.rank, task.peer))
        if op.op_class in HOST_COPY_CLASSES:
            if self.coster.device_is_host or op.bytes <= 0:  # a CPU process's "device" is the host
                return fixed
            return self._host_copy(op, task.rank)
        if op.duration_s is not None or self.coster.ideal_network or op.bytes <= 0:
            return fixed
        if op.dim == PP and task.peer >= 0:
            src, dst = (task.peer, task.rank) if task.kind == Kind.RECV else (task.rank, task.peer)
            timed = (self.coster.alone_time_s("p2p", op.bytes, (src, dst)),
                     self.coster.alone_time_s("p2p", 1.0, (src, dst)))
            return self._split(timed, self._p2p_phases(op.bytes, src, dst))
        if op.op_class in COLLECTIVE_OPS and op.dim:
            group = self.coster.group(op.dim, task.rank)
            if len(group) < 2:
                return fixed
            timed = (self.coster.alone_time_s(op.op_class, op.bytes, group),
                     self.coster.alone_time_s(op.op_class, 1.0, group))
            return self._split(timed, self._collective_phases(op, group))
        return fixed

    def _split(self, timed: tuple[float, float], phases: tuple[list[Phase], list[Phase]]) -> OpFlows:
        """``timed``: analytic seconds of the op alone at its size and at 1 byte; ``phases``: (the
        focal operation's phases alone, the phases with its folded peers). See the module doc."""
        (total_s, tiny_s), (own, everyone) = timed, phases
        total_s += self.coster.comm_delay_s
        alpha = min(total_s, tiny_s + self.coster.comm_delay_s)
        times = phase_times_s(self.capacity_Bps, own)
        fluid_s = sum(times)
        stretch = (total_s - alpha) / fluid_s if fluid_s > 0 else 1.0
        if stretch < 1.0:
            alpha, stretch = max(0.0, total_s - fluid_s), 1.0
        paced = []
        for (inc, nbytes), t in zip(everyone, times, strict=True):
            cap = nbytes / (t * stretch) if stretch > 1.0 and t > 0 else np.full(len(nbytes), np.inf)
            paced.append((inc, nbytes, cap))
        return OpFlows(alpha, tuple(paced))

    # ---- offload copies ----
    def _host_copy(self, op: Op, rank: int) -> OpFlows:
        """A PCIe or NVMe copy as one flow on its links (:mod:`sim.flow.host_copies`); folded, with
        the same copy of every rank it stands for on its node (same pipeline stage), which make
        theirs at the same time. No latency part, no pace: the links alone set the rate."""
        spec = self.model.cluster
        ranks = [rank]
        if self.folded:
            node = spec.node_of(rank)
            same = np.flatnonzero(self._pp == self._pp[rank]).tolist()
            ranks += [r for r in same if r != rank and spec.node_of(r) == node]
        paths = [self.router.edges_of(host_copy_vertices(spec, op.op_class, r)) for r in ranks]
        inc, nbytes = self._phase(paths, [op.bytes] * len(paths))
        return OpFlows(0.0, ((inc, nbytes, np.full(len(paths), np.inf)),))

    # ---- pipeline sends ----
    def _p2p_phases(self, size: float, src: int, dst: int) -> tuple[list[Phase], list[Phase]]:
        pairs = [(src, dst)]
        if self.folded:
            delta = dst - src
            peers = np.flatnonzero(self._pp == self._pp[src])
            pairs += [(int(r), int(r) + delta) for r in peers if r != src]
        paths = [self.router.route(a, b)[0] for a, b in pairs]
        return [self._phase(paths[:1], [size])], [self._phase(paths, [size] * len(paths))]

    # ---- collectives ----
    def _collective_phases(self, op: Op, group: tuple[int, ...]) -> tuple[list[Phase], list[Phase]]:
        groups = [group]
        if self.folded and op.dim is not None:
            stage = self._pp[group[0]]
            seen = {group}
            for r in np.flatnonzero(self._pp == stage).tolist():
                g = self.coster.group(op.dim, r)
                if g not in seen:
                    seen.add(g)
                    groups.append(g)
        flows = [self._flows(op.op_class, op.bytes, g) for g in groups]
        return self._by_phase(flows[:1]), self._by_phase(flows)

    def _flows(self, kind: str, size: float, group: tuple[int, ...]) -> list[Flow]:
        """NCCL's flows for the algorithm the model selects (ring where no decomposition exists)."""
        try:
            return self.model.flows(kind, size, group)
        except ValueError:  # includes alg.NotApplicable
            return collective_flows(self.model, kind, size, group, "ring")

    def _phase(self, paths: list[tuple[int, ...]], nbytes: list[float]) -> Phase:
        return incidence_of(paths), np.asarray(nbytes, float)

    def _by_phase(self, groups: list[list[Flow]]) -> list[Phase]:
        """All groups' flows, one Phase per NCCL phase index (phases run one after another)."""
        flows = [f for g in groups for f in g]
        out = []
        for phase in sorted({f.phase for f in flows}):
            mine = [f for f in flows if f.phase == phase]
            out.append(self._phase([f.edges for f in mine], [self.effective_bytes(f) for f in mine]))
        return out

    def effective_bytes(self, flow: Flow) -> float:
        """Bytes as the links see them: NVLS traffic runs at the NVLink's nvls_efficiency instead
        of its efficiency, i.e. as efficiency / nvls_efficiency more bytes (topo.algorithms)."""
        if flow.kind != "nvls":
            return flow.bytes
        nvlink = self.model.cluster.nvlink
        assert nvlink is not None and nvlink.nvls_efficiency > 0  # NVLS needs it (topo.algorithms)
        return flow.bytes * nvlink.efficiency / nvlink.nvls_efficiency

