"""Metrics computed only from a Timeline (simulated or measured alike).

Definitions, per training step. A rank's step window is, for a simulation, the step's first span
start to its last span end over all ranks; for a measured run, the rank's own step range
(``meta.step_windows``: rows of rank, step, start_s, end_s; ranks do not start a step
together). With several steps the figures are averaged.

- ``step_time_s``: the longest rank's window (what the slowest rank sees as the step period).
- ``bubble_fraction``: mean over pipeline stages of the share of the step in which the stage's
  compute stream is idle. Tensor/context-parallel collectives are part of a layer's execution
  (the compute stream waits on them inside the layer), so they do not count as bubble; they
  count as exposed communication instead.
- ``exposed_comm_fraction``: mean over ranks of the share of the step in which some
  communication stream is busy and the compute stream is idle.
- ``comm_overlap_fraction``: share of all communication time hidden under compute,
  |comm ∩ compute| / |comm| summed over ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from core.vocab import Lane
from sim import intervals
from sim.span_arrays import group_sums, pair_key, run_starts, stable_order
from sim.timeline import COMM_LANE_PREFIX, COMPUTE_LANE, Timeline

if TYPE_CHECKING:  # the per-rank frame is built (importing pandas) by the features that read it
    import pandas as pd

LAYER_COMM_LANES = (Lane.TP, Lane.CP)
RankRow = dict[str, float | int]  # rank, pp, step, step_time_s, compute_s, comm_s, exposed_comm_s, overlap_s, idle_s


@dataclass(frozen=True, kw_only=True)
class StepMetrics:
    """Timeline metrics of the simulated/measured steps (fractions in [0, 1], times in seconds)."""

    step_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    comm_overlap_fraction: float
    rank_rows: tuple[RankRow, ...]  # one per (rank, step), as :func:`rank_step_rows` gives them

    @cached_property
    def per_rank(self) -> pd.DataFrame:
        """The rows as a frame (:func:`rank_step_table`)."""
        import pandas as pd

        return pd.DataFrame(list(self.rank_rows))


def step_windows(tl: Timeline) -> dict[int, tuple[float, float]]:
    """Per step label, the (start, end) of its spans over all ranks."""
    step = tl.column("step")
    order = stable_order(step)
    starts, ends = tl.column("start_s").astype(float, copy=False), tl.column("end_s").astype(float, copy=False)
    if order is not None:
        step, starts, ends = step[order], starts[order], ends[order]
    first = run_starts(step)
    if first.size == 0:
        return {}
    lo, hi = np.fmin.reduceat(starts, first), np.fmax.reduceat(ends, first)  # NaN skipped, as pandas does
    return {int(s): (float(a), float(b)) for s, a, b in zip(step[first].tolist(), lo, hi, strict=True)}


def rank_windows(tl: Timeline) -> dict[tuple[int, int], tuple[float, float]]:
    """(rank, step) -> the rank's step window: from ``meta.step_windows`` when the Timeline
    carries them (measured runs), else the step's window over all ranks."""
    given = tl.meta.step_windows
    if given:
        return {(int(r), int(s)): (float(a), float(b)) for r, s, a, b in given}
    windows = step_windows(tl)
    rank, step = tl.column("rank"), tl.column("step")
    key = pair_key(rank, step)
    seen = run_starts(key) if stable_order(key) is None else np.unique(key, return_index=True)[1]
    pairs = sorted(seen.tolist())  # in order of first appearance, as drop_duplicates keeps them
    return {(int(rank[i]), int(step[i])): windows[int(step[i])] for i in pairs if int(step[i]) in windows}


def rank_step_table(tl: Timeline) -> pd.DataFrame:
    """One row per (rank, step): busy/idle/communication seconds inside the rank's step window
    (:func:`rank_step_rows` as a frame)."""
    import pandas as pd

    return pd.DataFrame(rank_step_rows(tl))


def rank_step_rows(tl: Timeline) -> list[RankRow]:
    """One row per (rank, step): busy/idle/communication seconds inside the rank's step window."""
    windows = rank_windows(tl)
    rank_pp = tl.meta.rank_pp
    rank, step = tl.column("rank"), tl.column("step")
    lanes = tl.labels("lane")
    masks = (lanes.mask(lambda name: name == COMPUTE_LANE),
             lanes.mask(lambda name: name.startswith(COMM_LANE_PREFIX)),
             lanes.mask(lambda name: name == COMPUTE_LANE or name in LAYER_COMM_LANES))
    starts, ends = tl.column("start_s").astype(float, copy=False), tl.column("end_s").astype(float, copy=False)
    key = pair_key(rank, step)
    order = stable_order(key)  # each (rank, step) a run, its spans in Timeline order
    if order is not None:
        key, rank, step, starts, ends = key[order], rank[order], step[order], starts[order], ends[order]
        masks = tuple(m[order] for m in masks)
    first = run_starts(key).tolist()
    rows = []
    for a, b in zip(first, [*first[1:], key.size], strict=True):
        pair = (int(rank[a]), int(step[a]))
        if pair not in windows:
            continue
        lo, hi = windows[pair]
        s, e = starts[a:b], ends[a:b]
        compute, comm, working = (intervals.union(*intervals.clip(s[m[a:b]], e[m[a:b]], lo, hi)) for m in masks)
        rows.append(_rank_row(compute, comm, working, pair[0], pair[1], lo, hi, rank_pp.get(pair[0], pair[0])))
    return rows


def _rank_row(compute: intervals.Intervals, comm: intervals.Intervals, working: intervals.Intervals, rank: int,
              step: int, lo: float, hi: float, pp: int) -> dict[str, float | int]:
    """The table row of one (rank, step) from the unions of its compute, communication and
    in-layer (compute and TP/CP communication) spans inside its window [lo, hi]."""
    compute_s = float((compute[1] - compute[0]).sum())
    comm_s = float((comm[1] - comm[0]).sum())
    overlap_s = intervals.intersection_length(compute, comm)
    return {
        "rank": rank, "pp": pp, "step": step, "step_time_s": hi - lo,
        "compute_s": compute_s, "comm_s": comm_s, "overlap_s": overlap_s,
        "exposed_comm_s": comm_s - overlap_s,
        "idle_s": (hi - lo) - float((working[1] - working[0]).sum()),
    }


def compute_flops(tl: Timeline) -> float:
    """FLOPs of the Timeline's compute spans (every step it holds)."""
    compute = tl.label_mask("lane", lambda lane: lane == COMPUTE_LANE)
    return float(tl.column("flops").astype(float, copy=False)[compute].sum())


def step_metrics(tl: Timeline) -> StepMetrics:
    """Step time, bubble, exposed communication and overlap of a Timeline (the figures pandas'
    grouped max/mean/sum of :func:`rank_step_table` give, bit for bit)."""
    return metrics_from_rows(rank_step_rows(tl))


def metrics_from_rows(rows: list[RankRow]) -> StepMetrics:
    """:func:`step_metrics` from the (rank, step) rows :func:`rank_step_rows` gives (or rows of
    an extended step made without its Timeline, :mod:`sim.window_step`)."""
    if not rows:
        raise ValueError("timeline has no spans inside any step")
    col = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    with np.errstate(divide="ignore", invalid="ignore"):
        step_time = _mean(_by(col["step"], col["step_time_s"], np.fmax.reduceat))
        per_stage_idle = _by(col["pp"], col["idle_s"] / col["step_time_s"], _group_mean)
        exposed = _mean(col["exposed_comm_s"] / col["step_time_s"])
    comm_total = float(np.nansum(col["comm_s"]))
    overlap = float(np.nansum(col["overlap_s"]) / comm_total) if comm_total > 0 else 0.0
    return StepMetrics(step_time_s=step_time, bubble_fraction=_mean(per_stage_idle),
                       exposed_comm_fraction=exposed, comm_overlap_fraction=overlap, rank_rows=tuple(rows))


def _by(key: np.ndarray, values: np.ndarray, reduce: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """``reduce(values, first)`` over the groups of equal ``key``, in key order (rows of a group
    in their order), as pandas' ``groupby(key)`` sorts them."""
    order = np.argsort(key, kind="stable")
    return reduce(values[order], run_starts(key[order]))


def _group_mean(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Each group's mean, as pandas' grouped ``mean`` (a Kahan-compensated sum over the count)."""
    return group_sums(values, first) / np.add.reduceat((~np.isnan(values)).astype(float), first)


def _mean(values: np.ndarray) -> float:
    """The mean of the values that are not NaN (NaN if none), as pandas' ``Series.mean``."""
    valid = values[~np.isnan(values)]
    return float(valid.sum() / valid.size) if valid.size else float("nan")
