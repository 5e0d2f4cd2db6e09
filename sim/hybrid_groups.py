"""Hybrid-sharding data-parallel groups on the rank grid (FSDP ``HYBRID_SHARD``; torchtitan's
``dp_replicate`` x ``dp_shard`` mesh).

The DP group of a (tp, pp) position splits into ``R`` replicas, outermost
(:func:`schedules.hybrid.replica_and_place`). A replica's ranks (with the CP ranks, as FSDP shards over DP x CP)
are the shard group (axis ``dps``); the ranks at the same place and CP coordinate of every
replica are the replicate group (axis ``dpr``). :class:`sim.pricing.TaskCoster` resolves the
two with :func:`hybrid_groups`.
"""

from __future__ import annotations

import numpy as np

from core.errors import invalid
from core.groups import Axis
from schedules.hybrid import replica_and_place
from sim.placement import groups_sharing
from topo.placement import Placement


def hybrid_groups(placement: Placement, dim: str, replicas: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per rank its group id along ``dim`` ("dps" or "dpr"), and each group's ranks (sorted)."""
    dp = placement.sizes["dp"]
    if replicas < 1 or dp % replicas:
        raise invalid("dp_replicate", replicas, f"must divide dp={dp}")
    replica, place = replica_and_place(placement.coordinate_array("dp"), dp, replicas)
    fixed = [placement.coordinate_array("pp"), placement.coordinate_array("tp")]
    if dim == Axis.DP_SHARD:
        fixed.append(replica)
    else:
        fixed += [place, placement.coordinate_array("cp")]
    return groups_sharing(fixed)
