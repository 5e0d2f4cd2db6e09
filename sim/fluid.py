"""Work that progresses at shared rates, recomputed whenever a piece starts or ends (SimPy).

The common loop of the engine's shared resources — network channels (:mod:`sim.channels`), a CPU
host's cores and memory bandwidth (:mod:`sim.cores`) and the flow network (:mod:`sim.flow.network`):
one process owns the active work; when work is added or a piece finishes it advances everything
at the old rates, retires what is done (firing its event), recomputes the rates and sleeps until
the next completion or the next addition. Subclasses say how work progresses and how rates are
shared; :class:`SecondsShare` is the case of work measured in seconds alone (rate 1 = alone).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine passes its environment; a list-engine run does not load SimPy
    import simpy

EPS = 1e-12  # seconds of work left that count as done (float round-off), near time 0
RELATIVE_RESOLUTION = 1e-12  # and, later, this fraction of the current time


def time_resolution_s(now_s: float) -> float:
    """Seconds of work left (at its current rate) that count as done at simulated time ``now_s``.

    An absolute tolerance alone stops time: once ``now_s`` passes ~1e4 s, what is left of a
    piece of work can be below one ulp of ``now_s``, ``now + left == now`` and the loop would
    spin forever. The tolerance therefore grows with ``now_s`` (1e-12 of it, thousands of ulps:
    an error of one part in 1e12 of the simulated time)."""
    return max(EPS, RELATIVE_RESOLUTION * abs(now_s))


class FluidResource(ABC):
    """Owns the active work and the process that advances it; subclasses add work with
    :meth:`_admit` after :meth:`_advance`."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._wake: simpy.Event = env.event()
        self._last = 0.0
        env.process(self._run())

    def _advance(self) -> None:
        """Progress all work from the last update to now at the current rates."""
        elapsed = self.env.now - self._last
        self._last = self.env.now
        if elapsed > 0:
            self._progress(elapsed)

    def _admit(self) -> None:
        """Wake the process: work was added (call after :meth:`_advance` and adding it)."""
        if not self._wake.triggered:
            self._wake.succeed()

    @abstractmethod
    def _busy(self) -> bool:
        """Is any work active?"""

    @abstractmethod
    def _progress(self, elapsed_s: float) -> None:
        """Advance every active piece of work by ``elapsed_s`` seconds at its rate."""

    @abstractmethod
    def _retire(self, tolerance_s: float) -> None:
        """Remove finished work (at most ``tolerance_s`` seconds left at its current rate) and
        fire its events."""

    @abstractmethod
    def _rates(self) -> None:
        """Recompute the rates of the active work."""

    @abstractmethod
    def _next_s(self) -> float:
        """Seconds until the next piece of work finishes at the current rates."""

    def _run(self):  # type: ignore[no-untyped-def]
        while True:
            if not self._busy():
                self._wake = self.env.event()
                yield self._wake
                continue
            self._advance()
            self._retire(time_resolution_s(self.env.now))
            if not self._busy():
                continue
            self._rates()
            next_s = self._next_s()
            self._wake = self.env.event()
            yield self.env.timeout(next_s) | self._wake


@dataclass(eq=False)
class Work:
    """``remaining_s`` seconds of work (as long alone) progressing at ``rate``; ``done`` fires
    when it is finished."""

    remaining_s: float
    done: simpy.Event
    rate: float = 1.0


class SecondsShare(FluidResource):
    """Work measured in seconds alone; subclasses set each piece's ``rate`` in :meth:`_rates`."""

    def __init__(self, env: simpy.Environment) -> None:
        self.active: list[Work] = []
        super().__init__(env)

    def _start(self, work: Work) -> simpy.Event:
        """Add ``work`` now (finished at once if it has none); returns its done event."""
        if work.remaining_s <= 0:
            work.done.succeed()
            return work.done
        self._advance()
        self.active.append(work)
        self._admit()
        return work.done

    def _busy(self) -> bool:
        return bool(self.active)

    def _progress(self, elapsed_s: float) -> None:
        for work in self.active:
            work.remaining_s -= elapsed_s * work.rate

    def _retire(self, tolerance_s: float) -> None:
        for work in [w for w in self.active if w.remaining_s <= EPS or w.remaining_s <= tolerance_s * w.rate]:
            self.active.remove(work)
            work.done.succeed()

    def _next_s(self) -> float:
        return min(work.remaining_s / work.rate for work in self.active)
