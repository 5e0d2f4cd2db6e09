"""An event-driven flow network inside SimPy: batches of flows share links max-min fairly.

:meth:`FlowNetwork.transfer` starts a batch of flows (e.g. every flow of one collective phase)
and returns an event that fires when the last of them has delivered its bytes. One process owns
the active flows: whenever a batch starts or a flow finishes it advances every flow's remaining
bytes at the old rates, recomputes the max-min fair rates of all active flows
(:func:`sim.flow.maxmin.maxmin_rates`) and sleeps until the next completion or a new batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.flow.fluid import finished, subset
from sim.flow.maxmin import Incidence, maxmin_rates
from sim.fluid import FluidResource


@dataclass(eq=False)
class _Batch:
    inc: Incidence
    total: np.ndarray  # bytes of each flow
    remaining: np.ndarray
    cap: np.ndarray  # per-flow rate cap, bytes/s
    done: simpy.Event
    label: str
    rates: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class RateSample:
    """From ``time_s`` on, the flows of batch ``label`` (links ``inc``) ran at ``rates_Bps``
    (bytes/s each)."""

    time_s: float
    label: str
    rates_Bps: np.ndarray
    inc: Incidence

    def on_link(self, link: int) -> float:
        """Bytes/s the batch puts on ``link``."""
        return float(self.rates_Bps[np.unique(self.inc.owner()[self.inc.link_ids == link])].sum())


class FlowNetwork(FluidResource):
    """Links of ``capacity_Bps`` (bytes/s per link id) shared by the flows of active batches.

    ``record``: keep every rate change (:attr:`samples`) and the bytes delivered
    (:attr:`delivered_bytes`) for plots and tests.
    """

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray, *, record: bool = False) -> None:
        self.capacity = np.asarray(capacity_Bps, float)
        self.batches: list[_Batch] = []
        self.record = record
        self.samples: list[RateSample] = []
        self.delivered_bytes = 0.0
        self.recomputes = 0
        super().__init__(env)

    def transfer(self, inc: Incidence, nbytes: np.ndarray, cap: np.ndarray | None = None,
                 label: str = "") -> simpy.Event:
        """Start flows (links ``inc``, ``nbytes`` bytes each, rate caps ``cap`` bytes/s) now; the
        event fires when all of them have finished."""
        done = self.env.event()
        total = np.asarray(nbytes, float)
        cap = np.full(len(total), np.inf) if cap is None else np.asarray(cap, float)
        keep = ~finished(total, total) & (np.diff(inc.indptr) > 0)
        self.delivered_bytes += float(total[~keep].sum())  # nothing to cross: delivered at once
        if not keep.any():
            done.succeed()
            return done
        self._advance()
        self.batches.append(_Batch(subset(inc, keep), total[keep], total[keep].copy(), cap[keep], done, label))
        self._admit()
        return done

    def _busy(self) -> bool:
        return bool(self.batches)

    def _progress(self, elapsed_s: float) -> None:
        for b in self.batches:
            moved = np.minimum(b.rates * elapsed_s, b.remaining)
            b.remaining -= moved
            self.delivered_bytes += float(moved.sum())

    def _retire(self, tolerance_s: float) -> None:
        """Drop finished flows (round-off bytes left, or at most ``tolerance_s`` seconds at their
        current rate); fire the events of batches with none left."""
        alive = []
        for b in self.batches:
            done = finished(b.remaining, b.total)
            if len(b.rates) == len(b.remaining):
                done |= b.remaining <= tolerance_s * b.rates
            if done.all():
                self.delivered_bytes += float(b.remaining.sum())
                b.done.succeed()
                continue
            if done.any():
                self.delivered_bytes += float(b.remaining[done].sum())
                keep = ~done
                b.inc, b.total, b.remaining, b.cap = subset(b.inc, keep), b.total[keep], b.remaining[keep], b.cap[keep]
            alive.append(b)
        self.batches = alive

    def _rates(self) -> None:
        """Max-min fair rates over every active flow, written back per batch."""
        self.recomputes += 1
        indptrs, links, offset = [np.zeros(1, np.int64)], [], 0
        for b in self.batches:
            indptrs.append(b.inc.indptr[1:] + offset)
            links.append(b.inc.link_ids)
            offset += len(b.inc.link_ids)
        inc = Incidence(np.concatenate(indptrs), np.concatenate(links))
        rates = maxmin_rates(self.capacity, inc, np.concatenate([b.cap for b in self.batches]))
        start = 0
        for b in self.batches:
            b.rates = rates[start:start + len(b.total)]
            start += len(b.total)
            if self.record:
                self.samples.append(RateSample(self.env.now, b.label, b.rates.copy(), b.inc))

    def _next_s(self) -> float:
        return min(float(np.min(b.remaining / b.rates)) for b in self.batches)
