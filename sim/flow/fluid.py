"""Fluid flows on a static set: when does each flow finish if they all start at time 0?

The reference the event-driven network must agree with, and the uncontended time of one
collective (used to split an analytic cost into its latency part and its bandwidth part).
Rates are max-min fair (:mod:`sim.flow.maxmin`) and recomputed each time a flow finishes.
"""

from __future__ import annotations

import numpy as np

from sim.flow.maxmin import Incidence, maxmin_rates

DONE_FRACTION = 1e-9  # a flow with this fraction of its bytes left is finished (float round-off)


def subset(inc: Incidence, keep: np.ndarray) -> Incidence:
    """The incidence of the flows where ``keep`` is True (in order)."""
    lengths = np.diff(inc.indptr)[keep]
    indptr = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return Incidence(indptr, inc.link_ids[keep[inc.owner()]])


def finished(remaining: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Flows whose remaining bytes are round-off of their total."""
    return remaining <= DONE_FRACTION * total + 1e-6


def finish_times(capacity: np.ndarray, inc: Incidence, nbytes: np.ndarray,
                 cap: np.ndarray | None = None) -> np.ndarray:
    """Seconds at which each flow (all starting at 0) delivers its ``nbytes`` (``cap``: per-flow
    rate caps, bytes/s)."""
    nbytes = np.asarray(nbytes, float)
    cap = np.full(len(nbytes), np.inf) if cap is None else np.asarray(cap, float)
    out = np.zeros(len(nbytes))
    active = ~finished(nbytes, nbytes)
    remaining = nbytes.copy()
    now = 0.0
    while active.any():
        idx = np.flatnonzero(active)
        rates = maxmin_rates(capacity, subset(inc, active), cap[idx])
        dt = float(np.min(remaining[idx] / rates))
        remaining[idx] -= rates * dt
        now += dt
        done = idx[finished(remaining[idx], nbytes[idx])]
        out[done] = now
        active[done] = False
    return out


def phase_times_s(capacity: np.ndarray, phases: list[tuple[Incidence, np.ndarray]]) -> list[float]:
    """Seconds each phase (its flows started together, no other traffic) takes to its last flow."""
    return [float(finish_times(capacity, inc, b).max(initial=0.0)) for inc, b in phases]
