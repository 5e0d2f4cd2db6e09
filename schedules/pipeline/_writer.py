"""A per-rank action writer that numbers micro-batches per (stage, phase) as they are issued.

The V-shaped schedules (ZB-V, DualPipeV) are written as phases of "run a forward of chunk 0",
"run an input-gradient backward of chunk 1", ...; the writer supplies the micro-batch index.
"""

from __future__ import annotations

from collections import Counter, deque

from schedules.actions import Action
from schedules.pipeline._common import act


class RankWriter:
    """Builds one rank's order on the V stage map.

    ``forward``/``backward``/``weight`` issue the next micro-batch of a stage; ``full_backward``
    issues ``B`` immediately followed by ``W`` (an unsplit backward); ``split_backward`` issues
    ``B`` and queues its ``W`` for ``pop_weight``, which issues the oldest queued ``W`` if any.
    """

    def __init__(self, pp: int) -> None:
        self.pp = pp
        self.actions: list[Action] = []
        self._issued: Counter[tuple[int, str]] = Counter()
        self._pending_weights: deque[tuple[int, int]] = deque()

    def issued(self, stage: int, phase: str) -> int:
        """How many ``phase`` actions of ``stage`` were issued so far."""
        return self._issued[stage, phase]

    def forward(self, stage: int) -> None:
        """Issue the next forward of ``stage``."""
        self._emit(stage, "F")

    def backward(self, stage: int) -> None:
        """Issue the next input-gradient backward of ``stage`` (its ``W`` is issued by the caller)."""
        self._emit(stage, "B")

    def weight(self, stage: int) -> None:
        """Issue the next weight-gradient pass of ``stage``."""
        self._emit(stage, "W")

    def full_backward(self, stage: int) -> None:
        """Issue an unsplit backward of ``stage``: its ``B`` directly followed by its ``W``."""
        microbatch = self._issued[stage, "B"]
        self._emit(stage, "B")
        self._emit(stage, "W", microbatch)

    def split_backward(self, stage: int) -> None:
        """Issue ``B`` of ``stage`` and queue its ``W`` for :meth:`pop_weight`."""
        self._pending_weights.append((stage, self._issued[stage, "B"]))
        self._emit(stage, "B")

    def pop_weight(self) -> None:
        """Issue the oldest queued ``W``; do nothing when none is queued."""
        if self._pending_weights:
            stage, microbatch = self._pending_weights.popleft()
            self._emit(stage, "W", microbatch)

    def _emit(self, stage: int, phase: str, microbatch: int | None = None) -> None:
        if microbatch is None:
            microbatch = self._issued[stage, phase]
        self.actions.append(act(stage, phase, microbatch, self.pp, "v"))
        self._issued[stage, phase] += 1
