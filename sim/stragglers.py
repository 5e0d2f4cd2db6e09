"""Stragglers as an expected value: how much later than its average member a collective starts.

Real ranks do not reach a collective together: each one's compute since its previous
synchronisation varies (OS and driver jitter, clocks, thermal throttling, data-dependent work).
If rank r's compute time T_r = T (1 + cv Z_r) with independent standard normals Z_r, the
collective starts with the last of its n members, on average ``cv * T * E[max of n standard
normals]`` after the mean arrival: the wait every other member spends inside the collective. The
simulator's ranks are deterministic and identical, so it adds this delay at each collective
(``Job.jitter_cv``; 0 = off). The expected maximum grows like sqrt(2 ln n): jitter costs more the
more ranks synchronise. Units: seconds; ``cv`` is dimensionless.
"""

from __future__ import annotations

from topo.variability import expected_max_normal

__all__ = ["expected_max_normal", "straggler_delay_s"]


def straggler_delay_s(cv: float, compute_s: float, n: int) -> float:
    """Seconds after its members' mean arrival that a collective of ``n`` ranks starts when each
    rank's ``compute_s`` of work since its last synchronisation varies with coefficient ``cv``."""
    if cv <= 0.0 or compute_s <= 0.0 or n < 2:
        return 0.0
    return cv * compute_s * expected_max_normal(n)
