"""The ranks of every communication group on the placement: a :class:`core.groups.CommGroup`
resolved once per job to each rank's group (parallel dimensions, hybrid-sharding replicas,
Megatron-Core's expert layout), and the groups of the same stage that run a collective together."""

from __future__ import annotations

import numpy as np

from core.groups import Axis, CommGroup
from sim.hybrid_groups import hybrid_groups
from sim.placement import expert_groups, groups_sharing
from topo.placement import Placement


class RankGroups:
    """Each communication group's ranks on one placement (resolved on first use)."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self._groups: dict[CommGroup, tuple[np.ndarray, list[tuple[int, ...]]]] = {}
        self._same_stage: dict[tuple[CommGroup, int], list[tuple[int, ...]]] = {}
        self._pp = placement.coordinate_array("pp")

    def group(self, dim: CommGroup, rank: int) -> tuple[int, ...]:
        """Ranks of ``rank``'s group ``dim`` (``DP`` means the DP x CP group; an expert group its
        group in Megatron-Core's expert rank order, :mod:`sim.placement`)."""
        ids, members = self._index(dim)
        return members[int(ids[rank])]

    def _index(self, dim: CommGroup) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """Per rank its group id in ``dim``, and each group's member ranks (sorted)."""
        if dim not in self._groups:
            self._groups[dim] = self._resolve(dim)
        return self._groups[dim]

    def _resolve(self, dim: CommGroup) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        if dim.is_expert:
            return expert_groups(self.placement, dim.axis, dim.ep, dim.etp)
        if dim.is_hybrid:
            return hybrid_groups(self.placement, dim.axis, dim.replicas)
        if dim.axis == Axis.WORLD:
            return np.zeros(self.placement.world_size, dtype=np.int64), [tuple(range(self.placement.world_size))]
        varying = {Axis.DP: (Axis.DP, Axis.CP), Axis.MP: (Axis.TP, Axis.PP), Axis.PP_ENDS: (Axis.PP,)}.get(dim.axis, (dim.axis,))
        ids, members = groups_sharing([self.placement.coordinate_array(d) for d in self.placement.order
                                       if d not in varying])
        if dim.axis == Axis.PP_ENDS:  # a pipeline group's first and last rank (one rank without pipelining)
            last = int(self._pp.max())
            members = [tuple(r for r in g if int(self._pp[r]) in (0, last)) for g in members]
        return ids, members

    def concurrent(self, dim: CommGroup, group: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Other groups of the same dimension at the same pipeline stage: they run the same
        collective at the same time (symmetric ranks in lock step)."""
        pp = int(self._pp[group[0]])
        key = (dim, pp)
        if key not in self._same_stage:
            _, members = self._index(dim)
            self._same_stage[key] = [g for g in members if int(self._pp[g[0]]) == pp]
        return [g for g in self._same_stage[key] if g != group]
