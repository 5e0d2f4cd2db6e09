"""The nodes' network channels of a list-engine pass: transfers sharing a channel progress at 1/k
(processor sharing, as :mod:`sim.channels`), k the most distinct streams on one of its channels."""

from __future__ import annotations


class Transfer:
    """A transfer in progress: ``left`` seconds of work (as long alone) at ``rate`` since ``last``."""

    __slots__ = ("channels", "last", "left", "rate", "stream", "task", "version")

    def __init__(self, task: int, left: float, channels: tuple[int, ...], stream: str, now: float) -> None:
        self.task, self.left, self.channels, self.stream = task, left, channels, stream
        self.rate, self.last, self.version = 1.0, now, 0


class Network:
    """The nodes' network channels: each transfer progresses at 1/k, k the most distinct streams
    on any of its channels (processor sharing, as :class:`sim.channels.SharedChannels`). A start
    or an end changes k, and so the rates, only on its own channels, and only when its stream
    is the first or last of its kind there; only then are the transfers sharing those channels
    advanced and re-timed (a transfer's ``left`` is advanced whenever its rate changes, so its
    end is exact between changes)."""

    def __init__(self) -> None:
        self.transfers: dict[int, Transfer] = {}
        self.on_channel: dict[int, set[int]] = {}
        self.streams: dict[int, dict[str, int]] = {}  # per channel: transfers per stream

    def start(self, i: int, work_s: float, channels: tuple[int, ...], stream: str, now: float) -> list[Transfer]:
        """Add transfer ``i``; returns the transfers whose rate may have changed (advanced to now):
        itself, and those sharing a channel where its stream is new (k grows there)."""
        new_stream = False
        for ch in channels:
            counts = self.streams.get(ch)
            if counts is None or stream not in counts:
                new_stream = True
        touched = self._advance_sharing(channels, now) if new_stream else []
        t = self.transfers[i] = Transfer(i, work_s, channels, stream, now)
        for ch in channels:
            on = self.on_channel.get(ch)
            if on is None:
                on = self.on_channel[ch] = set()
            on.add(i)
            counts = self.streams.get(ch)
            if counts is None:
                counts = self.streams[ch] = {}
            counts[stream] = counts.get(stream, 0) + 1
        touched.append(t)
        return touched

    def finish(self, i: int, now: float) -> list[Transfer]:
        """Remove transfer ``i``; returns the transfers whose rate may have changed (advanced to
        now): those sharing a channel its stream leaves (none while another transfer of its
        stream runs on each of its channels: no rate changes)."""
        t = self.transfers.pop(i)
        stream, gone = t.stream, False
        for ch in t.channels:
            self.on_channel[ch].discard(i)
            counts = self.streams[ch]
            left = counts[stream] - 1
            if left:
                counts[stream] = left
            else:
                del counts[stream]
                gone = True
        return self._advance_sharing(t.channels, now) if gone else []

    def advance_sharing(self, channel: int, now: float) -> list[Transfer]:
        """The transfers on ``channel``, advanced to ``now`` (their rates are about to change)."""
        return self._advance_sharing((channel,), now)

    def _advance_sharing(self, channels: tuple[int, ...], now: float) -> list[Transfer]:
        if len(channels) == 1:
            ids: set[int] | tuple[()] = self.on_channel.get(channels[0], ())
        else:
            ids = {j for ch in channels for j in self.on_channel.get(ch, ())}
        out = []
        transfers = self.transfers
        for j in sorted(ids):
            t = transfers[j]
            t.left -= (now - t.last) * t.rate
            t.last = now
            out.append(t)
        return out

    def retime(self, t: Transfer) -> float:
        """Recompute ``t``'s rate; the time it would end at that rate."""
        channels = t.channels
        if len(channels) == 1:
            t.rate = 1.0 / len(self.streams[channels[0]])
        else:
            t.rate = 1.0 / max(len(self.streams[ch]) for ch in channels)
        t.version += 1
        return t.last + max(t.left, 0.0) / t.rate
