"""Per pipeline action: a ``trainsim:F/B/W`` profiler range and the optional compute slowdown.

``--slow-rank R:factor`` makes rank R's compute ``factor`` times slower: after each forward or
backward action the rank is held for ``(factor - 1)`` times the action's duration (the device is
synchronised first, so the measurement covers the device work). A GPU rank's host sleeps (the
device is what is slow); a CPU rank spins, keeping its core busy as a slower processor would,
so that other processes sharing the machine see the same load as if it computed longer. The
hold happens inside the action's range, so the trace shows the slowed action as one span.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.profiler import record_function

from profiler.annotations import action_name


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (no-op on CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def hold(device: torch.device, seconds: float) -> None:
    """Keep the rank busy for ``seconds``: spin on a CPU rank, sleep on an accelerator rank."""
    if device.type != "cpu":
        time.sleep(seconds)
        return
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@dataclass(frozen=True, kw_only=True)
class ActionRecorder:
    """Wraps pipeline actions of one stage.

    Attributes:
        stage: virtual stage index (pipeline order).
        chunk: index of this stage among the rank's stages.
        device: the rank's device (synchronised before measuring a slowed action).
        slow_factor: compute slowdown factor (1.0: none).
    """

    stage: int
    chunk: int
    device: torch.device
    slow_factor: float = 1.0

    @contextmanager
    def action(self, phase: str, microbatch: int) -> Iterator[None]:
        """Run one action (phase F, B or W) of ``microbatch`` inside its range."""
        with record_function(action_name(phase, self.stage, self.chunk, microbatch)):
            if self.slow_factor == 1.0:
                yield
                return
            synchronize(self.device)
            start_s = time.perf_counter()
            yield
            synchronize(self.device)
            hold(self.device, (self.slow_factor - 1.0) * (time.perf_counter() - start_s))
