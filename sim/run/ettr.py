"""The closed-form effective training time ratio (ETTR) and where the rest of the time goes.

Training alternates segments of ``interval_s`` of work and a checkpoint that blocks for
``blocking_s``. Failures arrive as a Poisson process of rate ``rate_s`` while the job runs (not
while it restarts). A failure costs the work since the last durable checkpoint, then
``restart_s`` (detection, rescheduling, initialisation, checkpoint load, warm-up) and
``repair_wait_s`` (no free node). The expected wall time of a segment is then, exactly
(Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22
(2006), the cost function of his complete model, with the restart not exposed to failures):

    E = (1/rate + C) * (exp(rate * (interval + blocking)) - 1),    C = restart + repair wait + extra loss

and ETTR = interval / E. ``extra_loss_s`` is the work lost on top when the last checkpoint was not
yet durable (an async write still in flight: a failure in that window rolls back one more
interval; to first order that costs the window's length per failure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class FailureCosts:
    """Seconds one interruption costs on average besides the lost work since the checkpoint.

    Attributes:
        restart_s: detection + rescheduling + initialisation + checkpoint load + warm-up.
        repair_wait_s: waiting for a repaired node when no spare is free.
        extra_loss_s: work lost on top (the async write window), see the module docstring.
    """

    restart_s: float
    repair_wait_s: float = 0.0
    extra_loss_s: float = 0.0

    @property
    def total_s(self) -> float:
        """All of it, seconds."""
        return self.restart_s + self.repair_wait_s + self.extra_loss_s


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Shares of wall time (they sum to 1) and the expected interruptions per second of wall time.

    Attributes:
        productive: training that counts (the ETTR).
        checkpoint: blocked on checkpoints.
        lost_work: work redone after failures.
        restart: restarting (detection, initialisation, checkpoint load, warm-up).
        repair_wait: waiting for a node to be repaired.
        interruptions_per_s: failures per second of wall time.
        slow_rank: training at a degraded rank's pace and swapping it (:mod:`sim.run.slow_ranks`).
    """

    productive: float
    checkpoint: float
    lost_work: float
    restart: float
    repair_wait: float
    interruptions_per_s: float
    slow_rank: float = 0.0

    def shares(self) -> dict[str, float]:
        """The six shares by name."""
        return {"productive": self.productive, "checkpoint": self.checkpoint, "lost_work": self.lost_work,
                "restart": self.restart, "repair_wait": self.repair_wait, "slow_rank": self.slow_rank}

    def with_slow_ranks(self, share: float) -> Breakdown:
        """This breakdown with ``share`` of wall time (< 1) going to slowing failures; the other
        shares and the interruptions per wall second shrink by 1 - share."""
        keep = 1.0 - share
        return Breakdown(productive=self.productive * keep, checkpoint=self.checkpoint * keep,
                         lost_work=self.lost_work * keep, restart=self.restart * keep,
                         repair_wait=self.repair_wait * keep, interruptions_per_s=self.interruptions_per_s * keep,
                         slow_rank=self.slow_rank * keep + share)


MAX_EXPONENT = 700.0
"""rate x segment length past which a segment is taken never to complete (infinite expected wall
time, ETTR 0): exp(700) ~ 1e304 expected attempts, and ``math.expm1`` overflows past ~709.78."""


def failures_per_segment(rate_s: float, length_s: float) -> float:
    """Expected failures before a segment of ``length_s`` completes: exp(rate x length) - 1
    (infinite past :data:`MAX_EXPONENT`)."""
    if rate_s <= 0.0:
        return 0.0
    exponent = rate_s * length_s
    return math.inf if exponent > MAX_EXPONENT else math.expm1(exponent)


def segment_wall_s(rate_s: float, interval_s: float, blocking_s: float, costs: FailureCosts) -> float:
    """Expected wall seconds to get one segment (interval + checkpoint) done (module docstring)."""
    length = interval_s + blocking_s
    if rate_s <= 0.0:
        return length
    return (1.0 / rate_s + costs.total_s) * failures_per_segment(rate_s, length)


def ettr_breakdown(rate_s: float, interval_s: float, blocking_s: float, costs: FailureCosts) -> Breakdown:
    """ETTR and the loss shares for failures at ``rate_s`` per second (module docstring)."""
    wall = segment_wall_s(rate_s, interval_s, blocking_s, costs)
    failures = failures_per_segment(rate_s, interval_s + blocking_s)
    restart = failures * costs.restart_s
    repair = failures * costs.repair_wait_s
    lost = wall - interval_s - blocking_s - restart - repair
    return Breakdown(productive=interval_s / wall, checkpoint=blocking_s / wall, lost_work=max(0.0, lost) / wall,
                     restart=restart / wall, repair_wait=repair / wall, interruptions_per_s=failures / wall)


def ettr(rate_s: float, interval_s: float, blocking_s: float, costs: FailureCosts) -> float:
    """The effective training time ratio alone (:func:`ettr_breakdown`)."""
    return interval_s / segment_wall_s(rate_s, interval_s, blocking_s, costs)


def mtti_s(rate_s: float) -> float:
    """Mean time to interrupt, seconds (infinite with no failures)."""
    return math.inf if rate_s <= 0 else 1.0 / rate_s
