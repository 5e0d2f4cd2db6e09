"""Failures that only slow a rank (``kills_job = false``): what they cost until the rank is replaced.

A degraded GPU (throttled clocks, a failing HBM stack, a lane-reduced link) keeps the job running,
at its pace: synchronous training waits for the slowest member at every collective and pipeline
hand-off, the premise of the simulator's straggler model (:mod:`sim.pricing`: compute runs at the
job's slowest device's pace, :func:`topo.variability.slowest_gpu_factor`). A class of ``slowdown``
s therefore sets the job's compute pace to max(p, s), p being the job's own slowest-GPU pace; the
slowed step is the job simulated again at that pace (:func:`simulated_slow_steps`, ``slow_pace`` =
max(p, s) / p), or, where no simulation is at hand (explore), the bound step x max(p, s) / p.

Until it is noticed (``detect_s``) the job trains at step / slowed-step of its speed, so an event
costs ``detect_s x (1 - step / slowed)`` seconds of progress; then the node is swapped at a planned
restart: a checkpoint taken on demand (its blocking time), the restart (rescheduling,
initialisation, checkpoint load, warm-up) and, when no spare is free, the node's repair; no work
is lost. Events arrive at ``nodes x rate`` per second of wall time, so with r events per second
costing c seconds each the wall time grows by 1 / (1 - r c) (:meth:`SlowRanks.scale`); the Monte
Carlo draws each run's event count as Poisson(r x its failure-only wall time / (1 - r c)), which
has the same mean. Units: seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from sim.job import Job
from sim.run.inputs import ReliabilityInputs, bad
from sim.run.montecarlo import RunSamples
from topo.variability import slowest_gpu_factor


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlowRanks:
    """Slowing failures of one job.

    Attributes:
        rate_s: events per second of wall time (all slowing classes).
        cost_s: expected seconds of progress one event costs (slowed training + the swap).
        slowed_s: expected seconds of slowed training lost per event (part of ``cost_s``).
        slowed_step_s: the step under each class's slowdown (slowdown -> seconds).
    """

    rate_s: float = 0.0
    cost_s: float = 0.0
    slowed_s: float = 0.0
    slowed_step_s: Mapping[float, float] = dataclasses.field(default_factory=dict)

    @property
    def share(self) -> float:
        """Share of wall time the events take (r x c)."""
        return self.rate_s * self.cost_s

    def scale(self) -> float:
        """Factor on the wall time: 1 / (1 - r c)."""
        return 1.0 / (1.0 - self.share)


def pace_factor(job: Job, slowdown: float) -> float:
    """How much a GPU ``slowdown`` x slower than the median slows ``job``'s compute: max(p, s) / p,
    with p the job's own slowest-GPU pace (module docstring)."""
    pace = slowest_gpu_factor(job.cluster.device.speed_cv, job.plan.world_size)
    return max(pace, slowdown) / pace


def bound_slow_steps(job: Job, inputs: ReliabilityInputs, step_s: float) -> dict[float, float]:
    """Slowed steps bounded by step x pace factor (every second of the step paced by compute)."""
    return {c.slowdown: step_s * pace_factor(job, c.slowdown) for c in inputs.slowing()}


def simulated_slow_steps(job: Job, inputs: ReliabilityInputs) -> dict[float, float]:
    """Slowed steps from the simulator: ``job`` simulated again with its compute at the degraded
    GPU's pace (one simulation per distinct slowdown)."""
    from sim.simulate import simulate

    out: dict[float, float] = {}
    for c in inputs.slowing():
        if c.slowdown not in out:
            out[c.slowdown] = simulate(job, slow_pace=pace_factor(job, c.slowdown)).metrics.step_time_s
    return out


def slow_ranks(inputs: ReliabilityInputs, nodes: int, *, step_s: float, slowed_step_s: Mapping[float, float],
               swap_s: float, wait_probability: float) -> SlowRanks:
    """The slowing classes' events and costs; ``swap_s``: checkpoint on demand + restart seconds."""
    classes = inputs.slowing()
    if not classes:
        return SlowRanks()
    rates = np.array([c.per_node_s() * nodes for c in classes])
    slowed = np.array([c.detect_s * (1.0 - step_s / slowed_step_s[c.slowdown]) for c in classes])
    repair = np.array([c.repair_s if c.needs_node else 0.0 for c in classes]) * wait_probability
    weights = rates / rates.sum()
    out = SlowRanks(rate_s=float(rates.sum()), cost_s=float(weights @ (slowed + swap_s + repair)),
                    slowed_s=float(weights @ slowed), slowed_step_s=dict(slowed_step_s))
    if out.share >= 1.0:
        raise bad("classes", [c.cls.value for c in classes],
                  f"slowing failures every {1 / out.rate_s:.4g} s each costing {out.cost_s:.4g} s: the job never "
                  "finishes; lower their rate, detect_s or repair_s")
    return out


def add_slow_events(samples: RunSamples, slow: SlowRanks, seed: int) -> RunSamples:
    """``samples`` with each run's slowing events drawn and their cost added to its wall time
    (module docstring); a random stream of its own, so the failure draws stay as they were."""
    if slow.rate_s <= 0:
        return samples
    rng = np.random.default_rng([seed, 1])
    events = rng.poisson(slow.rate_s * samples.wall_s * slow.scale())
    return dataclasses.replace(samples, wall_s=samples.wall_s + events * slow.cost_s)
