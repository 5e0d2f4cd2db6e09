"""Where a data-parallel rank sits under hybrid sharding (FSDP ``HYBRID_SHARD``; torchtitan's
``dp_replicate`` x ``dp_shard`` mesh): replicas are outermost in the DP group (torchtitan's mesh
order ``["dp_replicate", "dp_shard", "cp", "tp"]``; FSDP's ``_init_intra_and_inter_node_groups``:
consecutive ranks share a shard group). The one statement of that layout, for the task builder
(:mod:`schedules.passes.dp`) and the pricer's groups (:mod:`sim.hybrid_groups`)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Coord = TypeVar("Coord", int, np.ndarray)


def replica_and_place(dp_coord: Coord, dp: int, replicas: int) -> tuple[Coord, Coord]:
    """(replica, place in the replica) of DP coordinate(s) ``dp_coord`` among ``dp`` ranks split
    into ``replicas`` replicas of ``dp // replicas`` consecutive coordinates."""
    per_replica = dp // replicas
    return dp_coord // per_replica, dp_coord % per_replica
