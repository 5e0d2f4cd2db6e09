"""The run-level model of one job, before any number is rolled up: what a step, a checkpoint and
an interruption cost, and the checkpoint interval used. :mod:`sim.run.predict` turns it into days,
dollars and energy; explore builds it from its own step estimate."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sim.job import Job
from sim.run.checkpoint import CheckpointCost, checkpoint_cost
from sim.run.ettr import Breakdown, FailureCosts, ettr_breakdown, failures_per_segment, mtti_s
from sim.run.failures import expected_costs, failure_draws
from sim.run.inputs import ReliabilityInputs
from sim.run.interval import numerical_optimum_s
from sim.run.montecarlo import FailureDraws
from sim.run.slow_ranks import SlowRanks, bound_slow_steps, slow_ranks
from sim.run.snapshot import SnapshotTiming


@dataclass(frozen=True, kw_only=True)
class RunModel:
    """The inputs of the run-level numbers of one job.

    Attributes:
        steps: training steps for the tokens; step_s: seconds per step; work_s: steps x step_s.
        rate_s: interruptions per second; checkpoint: one checkpoint's cost.
        draws, costs: what an interruption costs (per class; expected).
        interval_s: seconds of training between checkpoints (a whole number of steps).
        breakdown: the closed-form shares of wall time.
        slow: failures that only slow a rank (:mod:`sim.run.slow_ranks`).
    """

    steps: int
    step_s: float
    work_s: float
    rate_s: float
    checkpoint: CheckpointCost
    draws: FailureDraws
    costs: FailureCosts
    interval_s: float
    breakdown: Breakdown
    slow: SlowRanks

    @property
    def expected_wall_s(self) -> float:
        """Expected wall seconds of the run (closed form)."""
        return self.work_s / self.breakdown.productive

    @property
    def expected_interruptions(self) -> float:
        """Interruptions expected over the run (closed form: their rate per wall second x the wall time)."""
        return self.breakdown.interruptions_per_s * self.expected_wall_s


def whole_steps(interval_s: float, step_s: float) -> float:
    """``interval_s`` rounded to a whole number (>= 1) of steps, seconds."""
    return max(1, round(interval_s / step_s)) * step_s


def build_run_model(job: Job, inputs: ReliabilityInputs, *, step_s: float, rank_bytes: float, tokens: float,
                    slowed_step_s: Mapping[float, float] | None = None,
                    snapshot: SnapshotTiming | None = None) -> RunModel:
    """The run model of ``job`` training ``tokens`` tokens at ``step_s`` seconds per step, its
    largest rank holding ``rank_bytes`` of parameters and optimizer states; ``slowed_step_s``:
    the step under each slowing class's slowdown (default: the bound step x pace factor);
    ``snapshot``: the simulated device-to-host copy (default: the formula's)."""
    if not (isinstance(tokens, int | float) and not isinstance(tokens, bool) and math.isfinite(tokens) and tokens > 0):
        raise ValueError(f"tokens={tokens!r} is invalid: expected a number of tokens > 0")
    steps = math.ceil(tokens / (job.plan.global_batch * job.model.seq_len))
    ckpt = checkpoint_cost(job, rank_bytes, inputs.storage, inputs.checkpoint.mode, snapshot)
    rate = inputs.interrupt_rate_s(job.cluster.nodes)
    restart = inputs.restart.seconds(job.plan.world_size) + ckpt.read_s
    draws = failure_draws(inputs, job.cluster.nodes, restart, ckpt.persist_s)
    costs = expected_costs(draws)
    wanted = inputs.checkpoint.interval_s or numerical_optimum_s(rate, ckpt.blocking_s, costs)
    interval = whole_steps(min(wanted, steps * step_s), step_s)
    _check_finishes(rate, steps * step_s, interval, ckpt.blocking_s, job.cluster.nodes)
    slow = slow_ranks(inputs, job.cluster.nodes, step_s=step_s, swap_s=ckpt.blocking_s + restart,
                      slowed_step_s=bound_slow_steps(job, inputs, step_s) if slowed_step_s is None else slowed_step_s,
                      wait_probability=draws.wait_probability)
    breakdown = ettr_breakdown(rate, interval, ckpt.blocking_s, costs).with_slow_ranks(slow.share)
    return RunModel(steps=steps, step_s=step_s, work_s=steps * step_s, rate_s=rate, checkpoint=ckpt, draws=draws,
                    costs=costs, interval_s=interval, breakdown=breakdown, slow=slow)


MAX_INTERRUPTIONS = 100_000
"""Expected interruptions past which a run is refused: the Monte Carlo advances every sampled run
one interruption per round (:mod:`sim.run.montecarlo`), so its cost grows with them, and a run
interrupted this often is not one anybody starts (Llama 3 405B: 466 in 54 days on 16,384 GPUs)."""


def _check_finishes(rate_s: float, work_s: float, interval_s: float, blocking_s: float, nodes: int) -> None:
    """Raise a one-line ValueError when the run at this failure rate expects more than
    :data:`MAX_INTERRUPTIONS` interruptions (or never completes a checkpoint interval)."""
    expected = work_s / interval_s * failures_per_segment(rate_s, interval_s + blocking_s)
    if expected > MAX_INTERRUPTIONS:
        raise ValueError(
            f"reliability: the job is interrupted every {mtti_s(rate_s):.3g} s on average ({nodes} nodes); "
            f"at a checkpoint every {interval_s:.3g} s the run expects {expected:.3g} interruptions (more than "
            f"{MAX_INTERRUPTIONS:,}): lower the failure rates (reliability.classes.<class>.per_1000_node_days), "
            "the restart cost or the tokens")
