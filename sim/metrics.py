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

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.vocab import Lane
from sim import intervals
from sim.span_arrays import label_mask, pair_key, run_starts, stable_order
from sim.timeline import COMM_LANE_PREFIX, COMPUTE_LANE, Timeline

LAYER_COMM_LANES = (Lane.TP, Lane.CP)


@dataclass(frozen=True, kw_only=True)
class StepMetrics:
    """Timeline metrics of the simulated/measured steps (fractions in [0, 1], times in seconds)."""

    step_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    comm_overlap_fraction: float
    per_rank: pd.DataFrame  # rank, pp, step, step_time_s, compute_s, comm_s, exposed_comm_s, overlap_s, idle_s


def step_windows(tl: Timeline) -> dict[int, tuple[float, float]]:
    """Per step label, the (start, end) of its spans over all ranks."""
    df = tl.spans
    step = df["step"].to_numpy()
    order = stable_order(step)
    starts, ends = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
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
    rank, step = tl.spans["rank"].to_numpy(), tl.spans["step"].to_numpy()
    key = pair_key(rank, step)
    seen = run_starts(key) if stable_order(key) is None else np.unique(key, return_index=True)[1]
    pairs = sorted(seen.tolist())  # in order of first appearance, as drop_duplicates keeps them
    return {(int(rank[i]), int(step[i])): windows[int(step[i])] for i in pairs if int(step[i]) in windows}


def rank_step_table(tl: Timeline) -> pd.DataFrame:
    """One row per (rank, step): busy/idle/communication seconds inside the rank's step window."""
    windows = rank_windows(tl)
    rank_pp = tl.meta.rank_pp
    df = tl.spans
    rank, step = df["rank"].to_numpy(), df["step"].to_numpy()
    masks = (label_mask(df["lane"], lambda name: name == COMPUTE_LANE),
             label_mask(df["lane"], lambda name: name.startswith(COMM_LANE_PREFIX)),
             label_mask(df["lane"], lambda name: name == COMPUTE_LANE or name in LAYER_COMM_LANES))
    starts, ends = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
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
    return pd.DataFrame(rows)


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


def step_metrics(tl: Timeline) -> StepMetrics:
    """Step time, bubble, exposed communication and overlap of a Timeline."""
    table = rank_step_table(tl)
    if table.empty:
        raise ValueError("timeline has no spans inside any step")
    step_time = float(table.groupby("step")["step_time_s"].max().mean())
    per_stage_idle = (table["idle_s"] / table["step_time_s"]).groupby(table["pp"]).mean()
    exposed = float((table["exposed_comm_s"] / table["step_time_s"]).mean())
    comm_total = float(table["comm_s"].sum())
    overlap = float(table["overlap_s"].sum() / comm_total) if comm_total > 0 else 0.0
    return StepMetrics(step_time_s=step_time, bubble_fraction=float(per_stage_idle.mean()),
                       exposed_comm_fraction=exposed, comm_overlap_fraction=overlap, per_rank=table)
