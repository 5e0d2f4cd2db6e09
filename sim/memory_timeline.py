"""Per-rank HBM over the step, by category: step functions built from the Timeline and the plan.

Categories (bytes per GPU):

- ``params``, ``grads``, ``optimizer``: the model states the GPU keeps (ZeRO sharding and
  ZeRO-Offload/Infinity, :func:`schedules.memory.offloaded_state_bytes`), allocated for the
  whole step (Megatron/DeepSpeed keep contiguous parameter and gradient buffers).
- ``activations``: per (virtual stage, micro-batch), from its first forward span's start to its
  last backward span's end (W's share to the end of W); under activation offload absent between
  the end of its copy to the host and the start of its copy back (:class:`sim.memory.MemoryModel`).
- ``comm_buffers``: every communication span's message bytes during the span (TP/CP collectives,
  pipeline send/receive buffers, DP reductions); a ZeRO-3 all-gather's gathered parameters stay
  until the compute block that uses them ends.
- ``workspace``: one layer's rematerialized activations under full recomputation (whole step).

The peak is the highest total; ``fits`` compares it with HBM minus the reserve
(:data:`sim.summary.HBM_RESERVE_FRACTION`). Folded simulations hold one rank per pipeline stage,
standing for its peers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim import intervals
from sim.memory import INSTANT_TOLERANCE, MemoryCurve, MemoryModel
from sim.span_arrays import group_sums, label_mask, run_starts, stable_order
from sim.timeline import Timeline

CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "workspace")
GROUP_KEYS = ["rank", "step", "stage", "microbatch", "layer"]


@dataclass(frozen=True)
class MemoryTimeline:
    """HBM of one rank: ``bytes[c][i]`` is category c's bytes from ``times_s[i]`` to the next time."""

    rank: int
    times_s: np.ndarray
    bytes: dict[str, np.ndarray]

    @property
    def total(self) -> np.ndarray:
        """All categories at each time (bytes)."""
        return np.sum([self.bytes[c] for c in CATEGORIES], axis=0)

    @property
    def peak_index(self) -> int:
        """Index of the first time the total reaches its maximum."""
        return int(np.argmax(self.total))

    @property
    def peak_bytes(self) -> float:
        """Highest total bytes."""
        return float(self.total[self.peak_index])

    @property
    def peak_time_s(self) -> float:
        """When the peak is first reached (seconds)."""
        return float(self.times_s[self.peak_index])

    def at_peak(self) -> dict[str, float]:
        """Bytes of each category at the peak (what makes it)."""
        i = self.peak_index
        return {c: float(self.bytes[c][i]) for c in CATEGORIES}


def _step_function(t: np.ndarray, d: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Cumulative value of (t, d) events (summed per instant in the order given), sampled just
    after each of ``times``."""
    if t.size == 0:
        return np.zeros(times.size)
    order = stable_order(t)
    if order is not None:
        t, d = t[order], d[order]
    first = run_starts(t)
    level = np.cumsum(group_sums(d, first, reduceat=order is None))
    idx = np.searchsorted(t[first], times, side="right") - 1
    return np.where(idx >= 0, level[np.clip(idx, 0, None)], 0.0)


def comm_buffer_events(tl: Timeline) -> pd.DataFrame:
    """(rank, t, d) events of communication buffers: +bytes at a span's start, -bytes at its end,
    a ZeRO-3 parameter all-gather's end moved to the end of the compute block using it."""
    rank, t, d = _comm_buffer_arrays(tl)
    return pd.DataFrame({"rank": rank, "t": t, "d": d})


def _comm_buffer_arrays(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`comm_buffer_events` as (rank, t, d) arrays: every span's start, then every end."""
    df = tl.spans
    size = df["bytes"].to_numpy(float)
    rows = np.flatnonzero(label_mask(df["lane"], lambda lane: lane.startswith("comm")) & (size > 0))
    size = size[rows]
    free = df["end_s"].to_numpy(float)[rows]
    gathers = (label_mask(df["lane"], lambda lane: lane == "comm.dp")[rows]
               & label_mask(df["kind"], lambda kind: kind == "all_gather")[rows]
               & (df["layer"].to_numpy()[rows] >= 0))
    if gathers.any():
        free[gathers] = _using_block_end(df[label_mask(df["lane"], lambda lane: lane == "compute")],
                                         df.iloc[rows[gathers]])
    rank = df["rank"].to_numpy(np.int64)[rows]
    return np.concatenate([rank, rank]), np.concatenate([df["start_s"].to_numpy(float)[rows], free]), \
        np.concatenate([size, -size])


def _using_block_end(compute: pd.DataFrame, gathers: pd.DataFrame) -> np.ndarray:
    """For each all-gather, the end of the first compute block of its (rank, step, stage,
    micro-batch, layer) that ends after the gather does — the block that uses the gathered
    parameters, whether it starts after the gather (Megatron) or with work issued before it
    ends (FSDP2's copy-in, then the copy-out and the layer); the gather's end if none. A block
    is a run of consecutive compute spans with those labels."""
    spans = compute[GROUP_KEYS + ["start_s", "end_s"]].sort_values(["rank", "start_s"], kind="stable")
    changed = (spans[GROUP_KEYS].shift() != spans[GROUP_KEYS]).any(axis=1)
    run = changed.cumsum().rename("run")  # a block = a run of consecutive spans of one layer pass
    blocks = spans.groupby([run] + [spans[k] for k in GROUP_KEYS]).agg(start=("start_s", "min"), end=("end_s", "max"))
    blocks = blocks.reset_index().sort_values("end")
    left = gathers[GROUP_KEYS + ["end_s"]].reset_index().sort_values("end_s")
    merged = pd.merge_asof(left, blocks[GROUP_KEYS + ["start", "end"]], left_on="end_s", right_on="end",
                           by=GROUP_KEYS, direction="forward")
    merged = merged.set_index("index").loc[gathers.index]
    return merged["end"].fillna(merged["end_s"]).to_numpy(float)


def memory_timelines(memory: MemoryModel, tl: Timeline,
                     curves: dict[int, MemoryCurve] | None = None) -> dict[int, MemoryTimeline]:
    """Every simulated rank's HBM timeline (see the module docstring); ``curves``: the
    activation curves of ``tl`` when already computed."""
    curves = curves if curves is not None else memory.activation_curves(tl)
    rank_pp = tl.meta["rank_pp"]
    span_rank = tl.spans["rank"].to_numpy(np.int64)
    starts, ends = tl.spans["start_s"].to_numpy(float), tl.spans["end_s"].to_numpy(float)
    order = stable_order(span_rank)
    if order is not None:
        span_rank, starts, ends = span_rank[order], starts[order], ends[order]
    first = run_starts(span_rank)
    ranks = span_rank[first].tolist()
    if not first.size:
        return {}
    lows, highs = np.fmin.reduceat(starts, first), np.fmax.reduceat(ends, first)
    rank, t, d = _comm_buffer_arrays(tl)
    order = stable_order(rank)  # each rank's events in their order: starts, then ends
    if order is not None:
        rank, t, d = rank[order], t[order], d[order]
    bounds = np.searchsorted(rank, [*ranks, np.iinfo(np.int64).max])
    workspace = memory.workspace()
    out = {}
    for i, r in enumerate(ranks):
        lo, hi = float(lows[i]), float(highs[i])
        curve = curves[r]
        buf_t = intervals.snap(t[bounds[i]:bounds[i + 1]], INSTANT_TOLERANCE * (hi - lo))
        times = np.sort(np.concatenate([[lo, hi], curve.times_s, buf_t]), kind="stable")  # a few sorted runs
        times = times[np.concatenate([[True], times[1:] != times[:-1]])] if times.size else times  # np.unique
        act = _step_function(curve.times_s, np.diff(curve.bytes, prepend=0.0), times)
        states, _ = memory.state_bytes(rank_pp[r])
        ones = np.ones(times.size)
        ones[-1] = 0.0  # everything is freed at the window's end (so the plot closes)
        out[r] = MemoryTimeline(r, times, {
            "params": states.params * ones, "grads": states.grads * ones, "optimizer": states.optimizer * ones,
            "activations": act, "comm_buffers": _step_function(buf_t, d[bounds[i]:bounds[i + 1]], times),
            "workspace": workspace * ones,
        })
    return out
