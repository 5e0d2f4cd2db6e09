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


def _step_function(events: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Cumulative value of (t, d) events, sampled just after each of ``times``."""
    if events.empty:
        return np.zeros(times.size)
    ev = events.groupby("t", sort=True)["d"].sum()
    level = np.cumsum(ev.to_numpy(float))
    idx = np.searchsorted(ev.index.to_numpy(float), times, side="right") - 1
    return np.where(idx >= 0, level[np.clip(idx, 0, None)], 0.0)


def comm_buffer_events(tl: Timeline) -> pd.DataFrame:
    """(rank, t, d) events of communication buffers: +bytes at a span's start, -bytes at its end,
    a ZeRO-3 parameter all-gather's end moved to the end of the compute block using it."""
    df = tl.spans
    comm = df[_lane_startswith(df["lane"], "comm") & (df["bytes"] > 0)]
    free = comm["end_s"].copy()
    gathers = comm[(comm["lane"] == "comm.dp") & (comm["kind"] == "all_gather")
                   & (comm["layer"] >= 0)]
    size = comm["bytes"].astype(float)
    if not gathers.empty:
        free.loc[gathers.index] = _using_block_end(df[df["lane"] == "compute"], gathers)
    return pd.concat([
        pd.DataFrame({"rank": comm["rank"], "t": comm["start_s"], "d": size}),
        pd.DataFrame({"rank": comm["rank"], "t": free, "d": -size}),
    ])


def _lane_startswith(lanes: pd.Series, prefix: str) -> np.ndarray:
    """Rows whose lane starts with ``prefix`` (compared once per distinct lane)."""
    values = lanes.astype("category")
    wanted = [c for c in values.cat.categories if str(c).startswith(prefix)]
    return values.isin(wanted).to_numpy()


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
    comm = comm_buffer_events(tl)
    rank_pp = tl.meta["rank_pp"]
    out = {}
    bounds = tl.spans.groupby("rank", sort=True).agg(lo=("start_s", "min"), hi=("end_s", "max"))
    buffers = dict(tuple(comm.groupby("rank", sort=True)))
    for rank in tl.ranks:
        lo, hi = float(bounds.at[rank, "lo"]), float(bounds.at[rank, "hi"])
        curve = curves[rank]
        buf = buffers.get(rank, comm.iloc[:0])
        buf = buf.assign(t=intervals.snap(buf["t"], INSTANT_TOLERANCE * (hi - lo)))
        times = np.unique(np.concatenate([[lo, hi], curve.times_s, buf["t"].to_numpy(float)]))
        act = _step_function(pd.DataFrame({"t": curve.times_s, "d": np.diff(curve.bytes, prepend=0.0)}), times)
        states, _ = memory.state_bytes(rank_pp[rank])
        ones = np.ones(times.size)
        ones[-1] = 0.0  # everything is freed at the window's end (so the plot closes)
        out[rank] = MemoryTimeline(rank, times, {
            "params": states.params * ones, "grads": states.grads * ones, "optimizer": states.optimizer * ones,
            "activations": act, "comm_buffers": _step_function(buf, times), "workspace": memory.workspace() * ones,
        })
    return out
