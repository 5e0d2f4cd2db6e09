"""Bandwidth shared by concurrent transfers: processor sharing over named channels (SimPy).

A transfer that would take ``work_s`` seconds alone progresses at rate 1/k while k transfers of
*different streams* share one of its channels (e.g. a node's NICs carrying a data-parallel
all-reduce and a pipeline send at once). Transfers of the same stream kind on a channel are
already priced for each other by the collective cost model (symmetric groups running in lock
step), so they do not slow each other down twice. Rates are recomputed whenever a transfer
starts or ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

EPS = 1e-12  # seconds of work left that count as done (float round-off)


@dataclass(eq=False)
class _Transfer:
    remaining_s: float
    channels: tuple[str, ...]
    stream: str
    done: simpy.Event
    rate: float = field(default=1.0)


class SharedChannels:
    """Owns the active transfers and one process that advances them; call :meth:`transfer`."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.active: list[_Transfer] = []
        self._wake: simpy.Event = env.event()
        self._last = 0.0
        env.process(self._run())

    def transfer(self, work_s: float, channels: tuple[str, ...], stream: str) -> simpy.Event:
        """Start a transfer of ``work_s`` seconds (alone) over ``channels``; returns its done event."""
        done = self.env.event()
        if work_s <= 0 or not channels:
            done.succeed()
            return done
        self._advance()
        self.active.append(_Transfer(work_s, channels, stream, done))
        if not self._wake.triggered:
            self._wake.succeed()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self._last
        self._last = self.env.now
        if elapsed > 0:
            for t in self.active:
                t.remaining_s -= elapsed * t.rate

    def _rates(self) -> None:
        streams: dict[str, set[str]] = {}
        for t in self.active:
            for ch in t.channels:
                streams.setdefault(ch, set()).add(t.stream)
        for t in self.active:
            t.rate = 1.0 / max(len(streams[ch]) for ch in t.channels)

    def _run(self):  # type: ignore[no-untyped-def]
        while True:
            if not self.active:
                self._wake = self.env.event()
                yield self._wake
                continue
            self._advance()
            finished = [t for t in self.active if t.remaining_s <= EPS]
            for t in finished:
                self.active.remove(t)
                t.done.succeed()
            if not self.active:
                continue
            self._rates()
            next_s = min(t.remaining_s / t.rate for t in self.active)
            self._wake = self.env.event()
            yield self.env.timeout(next_s) | self._wake
