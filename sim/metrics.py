"""Metrics computed only from a Timeline (simulated or measured alike).

Definitions, per training step. A rank's step window is, for a simulation, the step's first span
start to its last span end over all ranks; for a measured run, the rank's own step range
(``meta["step_windows"]``: rows of rank, step, start_s, end_s; ranks do not start a step
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

import numpy as np
import pandas as pd

from sim import intervals
from sim.timeline import COMM_LANE_PREFIX, COMPUTE_LANE, Timeline

LAYER_COMM_LANES = ("comm.tp", "comm.cp")


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
    g = df.groupby("step", sort=True)
    return {int(s): (float(a), float(b)) for s, a, b in zip(g["start_s"].min().index, g["start_s"].min(), g["end_s"].max(), strict=True)}


def rank_windows(tl: Timeline) -> dict[tuple[int, int], tuple[float, float]]:
    """(rank, step) -> the rank's step window: from ``meta["step_windows"]`` when the Timeline
    carries them (measured runs), else the step's window over all ranks."""
    given = tl.meta.get("step_windows")
    if given:
        return {(int(r), int(s)): (float(a), float(b)) for r, s, a, b in given}
    windows = step_windows(tl)
    pairs = tl.spans[["rank", "step"]].drop_duplicates()
    return {(int(r), int(s)): windows[int(s)] for r, s in zip(pairs["rank"], pairs["step"], strict=True)
            if int(s) in windows}


def rank_step_table(tl: Timeline) -> pd.DataFrame:
    """One row per (rank, step): busy/idle/communication seconds inside the rank's step window."""
    windows = rank_windows(tl)
    rank_pp = tl.meta.get("rank_pp", {})
    rows = []
    df = tl.spans
    for (rank, step), part in df.groupby(["rank", "step"], sort=True, observed=True):
        key = (int(rank), int(step))
        if key not in windows:
            continue
        lo, hi = windows[key]
        rows.append(_rank_row(part, key[0], key[1], lo, hi, rank_pp.get(key[0], key[0])))
    return pd.DataFrame(rows)


def _rank_row(part: pd.DataFrame, rank: int, step: int, lo: float, hi: float, pp: int) -> dict[str, float | int]:
    lanes = part["lane"].astype("category")
    names = [str(c) for c in lanes.cat.categories]
    codes = lanes.cat.codes.to_numpy()
    s = part["start_s"].to_numpy()
    e = part["end_s"].to_numpy()

    def lane_mask(keep: Callable[[str], bool]) -> np.ndarray:
        return np.isin(codes, [i for i, name in enumerate(names) if keep(name)])

    compute_mask = lane_mask(lambda name: name == COMPUTE_LANE)
    comm_mask = lane_mask(lambda name: name.startswith(COMM_LANE_PREFIX))
    layer_mask = lane_mask(lambda name: name == COMPUTE_LANE or name in LAYER_COMM_LANES)
    compute = intervals.union(*intervals.clip(s[compute_mask], e[compute_mask], lo, hi))
    comm = intervals.union(*intervals.clip(s[comm_mask], e[comm_mask], lo, hi))
    working = intervals.union(*intervals.clip(s[layer_mask], e[layer_mask], lo, hi))
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
