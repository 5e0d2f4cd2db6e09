"""The step's power waveform from the simulated Timeline, and energy per step.

Each simulated rank is, at every instant, GEMM-bound (a compute span with FLOPs), memory-bound
(a compute span moving bytes only: norms, element-wise work, the optimizer), communicating only
(a span on a communication or copy lane and no compute), or idle (bubbles, waiting); its power is
:class:`sim.run.power.PowerProfile`'s for that activity. A folded rank stands for the ranks it
represents, so the mean over simulated ranks is the mean GPU's power at that instant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.vocab import Lane
from sim import intervals
from sim.run.power import Activity, PowerProfile
from sim.timeline import Timeline


@dataclass(frozen=True)
class PowerWave:
    """Mean power of one GPU over the simulated timeline: a step function.

    Attributes:
        times_s: interval boundaries (n + 1), seconds.
        gpu_w: the mean GPU's watts in each interval (n).
    """

    times_s: np.ndarray
    gpu_w: np.ndarray

    def mean_gpu_w(self) -> float:
        """Time-weighted mean of ``gpu_w``."""
        widths = np.diff(self.times_s)
        return float(widths @ self.gpu_w / widths.sum()) if widths.sum() > 0 else 0.0

    def node_w(self, profile: PowerProfile, gpus_per_node: int) -> np.ndarray:
        """A node's watts in each interval: its GPUs plus the baseline."""
        return gpus_per_node * self.gpu_w + profile.node_baseline_w


def _rank_sets(spans: object, rank: int) -> list[intervals.Intervals]:
    df = spans[spans["rank"].to_numpy() == rank]  # type: ignore[index]
    lane = df["lane"].astype(str).to_numpy()
    flops = df["flops"].to_numpy(float)
    s, e = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
    compute = lane == Lane.COMPUTE
    comm = ~compute & (lane != Lane.HOST)
    gemm = compute & (flops > 0)
    memory = compute & ~(flops > 0)
    return [intervals.union(s[m], e[m]) for m in (gemm, memory, comm)]


def step_wave(timeline: Timeline, profile: PowerProfile) -> PowerWave:
    """The mean GPU's power over ``timeline`` (module docstring)."""
    spans = timeline.spans
    ranks = [int(r) for r in timeline.ranks]
    sets = {r: _rank_sets(spans, r) for r in ranks}
    edges = [np.array([spans["start_s"].min(), spans["end_s"].max()], dtype=float)]
    edges += [a for rs in sets.values() for pair in rs for a in pair]
    times = np.unique(np.concatenate(edges))
    mid = (times[:-1] + times[1:]) / 2.0
    total = np.zeros(mid.size)
    for r in ranks:
        total += _rank_watts(mid, sets[r], profile)
    return PowerWave(times_s=times, gpu_w=total / max(1, len(ranks)))


def _rank_watts(mid: np.ndarray, sets: list[intervals.Intervals], profile: PowerProfile) -> np.ndarray:
    watts = np.full(mid.size, profile.watts(Activity.IDLE))
    for activity, pair in zip((Activity.COMM, Activity.MEMORY, Activity.GEMM), sets[::-1], strict=True):
        watts[intervals.contains(mid, *pair)] = profile.watts(activity)  # later wins: GEMM over memory over comm
    return watts


def step_energy_j(wave: PowerWave, profile: PowerProfile, *, step_s: float, world: int, gpus_per_node: int,
                  pue: float = 1.0) -> float:
    """Joules of the whole cluster per step: the mean GPU power over the simulated timeline times
    the step time, GPUs and node baselines, times the PUE."""
    nodes = world / gpus_per_node
    return pue * step_s * (world * wave.mean_gpu_w() + nodes * profile.node_baseline_w)
