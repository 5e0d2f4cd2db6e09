"""Where a rank sits in the expert grid of its pipeline stage, in Megatron-Core's rank order: the
stage's (tp, cp, dp) coordinates flattened with the placement's nesting (innermost first), then
split innermost first into expert tensor parallelism (``etp``), expert parallelism (``ep``) and
the expert-data-parallel rest (``edp``) (``RankGenerator`` with ``order="tp-cp-ep-dp-pp"``).
The one statement of that layout, for the task builder's group keys (:mod:`schedules.passes`)
and the pricer's groups (:mod:`sim.placement`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np

from core.errors import invalid

Coord = TypeVar("Coord", int, np.ndarray)
STAGE_DIMS = ("tp", "cp", "dp")


def expert_coordinates(coords: Mapping[str, Coord], sizes: Mapping[str, int], order: Sequence[str],
                       ep: int, etp: int) -> dict[str, Coord]:
    """A rank's (or, with arrays, every rank's) coordinate along ``etp``, ``ep`` and ``edp`` from
    its ``coords`` along tp, cp and dp, the dimensions' ``sizes`` and their ``order`` (innermost
    first, as :attr:`schedules.plan.ParallelPlan.placement`)."""
    stage_ranks = 1
    flat = 0 * coords["dp"]
    for dim in (d for d in order if d in STAGE_DIMS):
        flat = flat + coords[dim] * stage_ranks
        stage_ranks *= sizes[dim]
    if stage_ranks % (ep * etp):
        raise invalid("ep", ep, f"ep x etp = {ep * etp} must divide tp x cp x dp = {stage_ranks}")
    return {"etp": flat % etp, "ep": flat // etp % ep, "edp": flat // (etp * ep)}
