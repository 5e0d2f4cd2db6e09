"""Optimum checkpoint intervals.

- Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974:
  ``sqrt(2 * delta * M)`` for a checkpoint costing ``delta`` seconds and a mean time between
  failures ``M`` (as restated by Saxena et al. arXiv 2410.18124: "lost-time-optimal Tc = sqrt(2 Tf Ts)").
- Daly, FGCS 22(3), 2006, first-order form ``sqrt(2 * delta * M) - delta`` (as summarised in
  A. Colyer, "A higher order estimate of the optimum checkpoint interval for restart dumps", 2015).
- Saxena, Hukerikar, Blaz, Raj (NVIDIA), "Optimal checkpoint interval with availability as an
  objective function", arXiv 2410.18124: availability-optimal
  ``Tc = Ts + sqrt(2 * (Tf + Tr) * Ts + Ts**2)`` with save time Ts, mean time to failure Tf and
  recovery time Tr.
- the numerical optimum: the interval that maximises :func:`sim.run.ettr.ettr` exactly.
"""

from __future__ import annotations

import math

from sim.run.ettr import FailureCosts, ettr

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
MIN_INTERVAL_S = 1.0


def young_s(blocking_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 delta M), seconds."""
    return math.sqrt(2.0 * blocking_s * mtbf_s)


def daly_s(blocking_s: float, mtbf_s: float) -> float:
    """Daly (2006), first order: sqrt(2 delta M) - delta, seconds (M itself when delta >= 2M)."""
    if blocking_s >= 2.0 * mtbf_s:
        return mtbf_s
    return math.sqrt(2.0 * blocking_s * mtbf_s) - blocking_s


def availability_optimal_s(save_s: float, mttf_s: float, recovery_s: float) -> float:
    """Saxena et al. (2024): Ts + sqrt(2 (Tf + Tr) Ts + Ts^2), seconds."""
    return save_s + math.sqrt(2.0 * (mttf_s + recovery_s) * save_s + save_s**2)


def numerical_optimum_s(rate_s: float, blocking_s: float, costs: FailureCosts, upper_s: float = 30 * 86400.0) -> float:
    """The interval in [1 s, ``upper_s``] that maximises the closed-form ETTR (golden-section search
    on log(interval); the ETTR is unimodal in the interval). With no failures: ``upper_s``."""
    if rate_s <= 0.0:
        return upper_s
    lo, hi = math.log(MIN_INTERVAL_S), math.log(upper_s)

    def score(log_t: float) -> float:
        return ettr(rate_s, math.exp(log_t), blocking_s, costs)

    a, b = hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo)
    fa, fb = score(a), score(b)
    while hi - lo > 1e-6:
        if fa < fb:
            lo, a, fa = a, b, fb
            b = lo + GOLDEN * (hi - lo)
            fb = score(b)
        else:
            hi, b, fb = b, a, fa
            a = hi - GOLDEN * (hi - lo)
            fa = score(a)
    return math.exp((lo + hi) / 2.0)
