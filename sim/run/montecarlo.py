"""A seeded Monte Carlo of whole training runs: the days-to-train distribution (P10/P50/P90).

Each simulated run repeats: draw the time to the next failure (exponential of the job's rate, or
Weibull of the same mean when ``weibull_shape`` is set, restarted after each failure); complete
the whole segments (interval + checkpoint) that fit; lose the rest, and one more segment when the
failure lands within ``extra_loss_s`` of the last checkpoint (an async write not yet durable);
draw the failure's class (by rate), its restart and, for hardware without a free spare, its
repair wait. All runs advance together (numpy arrays), so thousands of 50-day runs take well under
a second. The same inputs and seed give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PERCENTILES = (10, 50, 90)
MAX_DRAWN_INTERRUPTIONS = 2e8
"""Interruptions a Monte Carlo may draw over all its runs (samples x expected per run): each round
advances every run by one, so the cost grows with the count (7.7e7 drawn took ~7 s here: 2,000
runs of ~38,700; ``sim.run.predict.run_samples`` refuses beyond this)."""


@dataclass(frozen=True, kw_only=True)
class FailureDraws:
    """What one failure costs, per class (arrays of one entry per failure class).

    Attributes:
        probability: the class's share of the failure rate.
        restart_s: restart seconds of the class (common restart + its detection).
        repair_s: repair seconds of the class (0 where no node is replaced).
        wait_probability: chance that no spare is free when a node is needed.
        extra_loss_s: the async window (see the module docstring).
    """

    probability: np.ndarray
    restart_s: np.ndarray
    repair_s: np.ndarray
    wait_probability: float
    extra_loss_s: float


@dataclass(frozen=True, kw_only=True)
class RunSamples:
    """Per simulated run: wall seconds, failures, and the seconds spent in each state."""

    wall_s: np.ndarray
    failures: np.ndarray
    checkpoint_s: np.ndarray
    lost_s: np.ndarray
    restart_s: np.ndarray
    repair_s: np.ndarray

    def percentiles_s(self) -> tuple[float, ...]:
        """Wall seconds at P10, P50, P90."""
        return tuple(float(np.percentile(self.wall_s, q)) for q in PERCENTILES)


def _up_times(rng: np.random.Generator, n: int, rate_s: float, shape: float | None) -> np.ndarray:
    if rate_s <= 0:
        return np.full(n, math.inf)
    if shape is None:
        return rng.exponential(1.0 / rate_s, n)
    return rng.weibull(shape, n) / (rate_s * math.gamma(1.0 + 1.0 / shape))


def simulate_runs(*, work_s: float, interval_s: float, blocking_s: float, rate_s: float, draws: FailureDraws,
                  samples: int, seed: int, weibull_shape: float | None = None) -> RunSamples:
    """Simulate ``samples`` runs that each need ``work_s`` seconds of training."""
    rng = np.random.default_rng(seed)
    seg = interval_s + blocking_s
    remaining = np.full(samples, float(work_s))
    acc = {k: np.zeros(samples) for k in ("wall", "fail", "ckpt", "lost", "restart", "repair")}
    active = np.arange(samples)
    while active.size:
        up = _up_times(rng, active.size, rate_s, weibull_shape)
        need = np.ceil(remaining[active] / interval_s - 1e-12)
        finish = (need - 1) * seg + remaining[active] - (need - 1) * interval_s + blocking_s
        done = up >= finish
        _finish(acc, active[done], finish[done], need[done] * blocking_s)
        _fail(acc, remaining, active[~done], up[~done], seg, interval_s, blocking_s, draws, rng)
        remaining[active[done]] = 0.0
        active = active[~done]
    return RunSamples(wall_s=acc["wall"], failures=acc["fail"], checkpoint_s=acc["ckpt"], lost_s=acc["lost"],
                      restart_s=acc["restart"], repair_s=acc["repair"])


def _finish(acc: dict[str, np.ndarray], idx: np.ndarray, finish: np.ndarray, ckpt: np.ndarray) -> None:
    acc["wall"][idx] += finish
    acc["ckpt"][idx] += ckpt


def _fail(acc: dict[str, np.ndarray], remaining: np.ndarray, idx: np.ndarray, up: np.ndarray, seg: float,
          interval_s: float, blocking_s: float, draws: FailureDraws, rng: np.random.Generator) -> None:
    """Runs ``idx`` fail after ``up`` seconds: keep the whole segments, lose the rest, restart."""
    done_segments = np.floor(up / seg)
    lost = up - done_segments * seg
    window = (lost < draws.extra_loss_s) & (done_segments >= 1)
    done_segments -= window
    lost += window * seg
    cls = rng.choice(draws.probability.size, size=idx.size, p=draws.probability)
    wait = (rng.random(idx.size) < draws.wait_probability) * draws.repair_s[cls]
    restart = draws.restart_s[cls]
    remaining[idx] -= done_segments * interval_s
    acc["wall"][idx] += up + restart + wait
    acc["fail"][idx] += 1
    acc["ckpt"][idx] += done_segments * blocking_s
    acc["lost"][idx] += lost
    acc["restart"][idx] += restart
    acc["repair"][idx] += wait
