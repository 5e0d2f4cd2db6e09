"""What an interruption costs, from the reliability inputs: the same numbers feed the closed form
(:class:`sim.run.ettr.FailureCosts`, expectations) and the Monte Carlo
(:class:`sim.run.montecarlo.FailureDraws`, per class).

Waiting for repair: a hardware failure needs a node. With ``spare_nodes`` hot spares, failed nodes
go to repair and come back as spares; the nodes in repair at a random instant are Poisson with mean
``m = nodes * sum(hardware rate x repair_s)`` (an M/G/infinity queue), so by PASTA a failure finds
no free spare with probability ``P(Poisson(m) >= spares)`` and then waits for its node's repair
(nodes swapped out for only slowing a rank count among those in repair).
"""

from __future__ import annotations

import math

import numpy as np

from sim.run.ettr import FailureCosts
from sim.run.inputs import ReliabilityInputs
from sim.run.montecarlo import FailureDraws


def poisson_at_least(mean: float, k: int) -> float:
    """P(Poisson(mean) >= k)."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    term, below = math.exp(-mean), 0.0
    for i in range(k):
        below += term
        term *= mean / (i + 1)
    return max(0.0, 1.0 - below)


def wait_probability(inputs: ReliabilityInputs, nodes: int) -> float:
    """Chance that a node-replacing failure finds no free spare (module docstring)."""
    in_repair = nodes * sum(c.per_node_s() * c.repair_s for c in (*inputs.killing(), *inputs.slowing())
                            if c.needs_node)
    return poisson_at_least(in_repair, inputs.spare_nodes)


def failure_draws(inputs: ReliabilityInputs, nodes: int, restart_s: float, extra_loss_s: float) -> FailureDraws:
    """Per-class costs of an interruption; ``restart_s``: the restart common to every class
    (rescheduling, initialisation, checkpoint load, warm-up)."""
    classes = inputs.killing()
    if not classes:
        return FailureDraws(probability=np.ones(1), restart_s=np.full(1, restart_s), repair_s=np.zeros(1),
                            wait_probability=0.0, extra_loss_s=extra_loss_s)
    rates = np.array([c.per_1000_node_days for c in classes], dtype=float)
    return FailureDraws(probability=rates / rates.sum(),
                        restart_s=np.array([restart_s + c.detect_s for c in classes]),
                        repair_s=np.array([c.repair_s if c.needs_node else 0.0 for c in classes]),
                        wait_probability=wait_probability(inputs, nodes), extra_loss_s=extra_loss_s)


def expected_costs(draws: FailureDraws) -> FailureCosts:
    """The expectations of :func:`failure_draws`' per-class costs."""
    p = draws.probability
    return FailureCosts(restart_s=float(p @ draws.restart_s),
                        repair_wait_s=draws.wait_probability * float(p @ draws.repair_s),
                        extra_loss_s=draws.extra_loss_s)
