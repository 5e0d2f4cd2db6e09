"""Bandwidth shared by concurrent transfers: processor sharing over named channels (SimPy).

A transfer that would take ``work_s`` seconds alone progresses at rate 1/k while k transfers of
*different streams* share one of its channels (e.g. a node's NICs carrying a data-parallel
all-reduce and a pipeline send at once). Transfers of the same stream kind on a channel are
already priced for each other by the collective cost model (symmetric groups running in lock
step), so they do not slow each other down twice. Rates are recomputed whenever a transfer
starts or ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from sim.fluid import SecondsShare, Work


@dataclass(eq=False)
class _Transfer(Work):
    channels: tuple[str, ...] = ()
    stream: str = ""


class SharedChannels(SecondsShare):
    """Owns the active transfers and one process that advances them; call :meth:`transfer`."""

    active: list[_Transfer]  # type: ignore[assignment]

    def transfer(self, work_s: float, channels: tuple[str, ...], stream: str) -> simpy.Event:
        """Start a transfer of ``work_s`` seconds (alone) over ``channels``; returns its done event."""
        if not channels:
            work_s = 0.0
        return self._start(_Transfer(work_s, self.env.event(), channels=channels, stream=stream))

    def _rates(self) -> None:
        streams: dict[str, set[str]] = {}
        for t in self.active:
            for ch in t.channels:
                streams.setdefault(ch, set()).add(t.stream)
        for t in self.active:
            t.rate = 1.0 / max(len(streams[ch]) for ch in t.channels)
