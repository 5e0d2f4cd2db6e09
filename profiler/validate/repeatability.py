"""How well the ground truth predicts itself: each recording of a configuration against the others.

A simulator cannot be shown closer to a measurement than the measurement is to itself. With two or
more recordings of one configuration (made at different times), each recording's figures are
compared with the pooled figures of the other recordings exactly as the simulator's are compared
with all of them (:func:`profiler.validate.compare.compare_figures`, the same targets): step time
relative, bubble and exposed communication in absolute points. This is the leave-one-out
repeatability of the measurement, the noise floor of the validation table: an error of the
simulator well inside it cannot be told from noise, and a target tighter than it cannot be met by
any model. For a like-for-like comparison the simulator is also compared with each recording alone
(:func:`against_each_recording`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from profiler.validate.compare import TARGETS, compare_figures
from profiler.validate.measured import MeasuredRun, StepFigures, step_figures
from sim.summary import round_sig

METRICS = tuple(TARGETS)


@dataclass(frozen=True)
class Repeatability:
    """Leave-one-out errors of a configuration's recordings (one entry per recording).

    ``errors[metric]`` holds, for each recording, (its figure - the others' pooled figure),
    relative for step time, absolute for the fractions; ``within[i]`` says whether recording i
    meets every target against the others."""

    errors: dict[str, tuple[float, ...]]
    within: tuple[bool, ...]

    @property
    def recordings(self) -> int:
        """Number of recordings compared."""
        return len(self.within)

    def median_abs(self, metric: str) -> float:
        """Median over the recordings of |error| of ``metric``."""
        return statistics.median(abs(e) for e in self.errors[metric])

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: median |error| per targeted metric, recordings, recordings within targets."""
        return {**{m: round_sig(self.median_abs(m), 3) for m in METRICS}, "recordings": self.recordings,
                "within_targets": sum(self.within)}


def _compared(pairs: list[tuple[StepFigures, StepFigures]]) -> Repeatability:
    """Errors of each (reference, candidate) pair: the candidate compared with the reference."""
    errors: dict[str, list[float]] = {m: [] for m in METRICS}
    within = []
    for reference, candidate in pairs:
        rows = [r for r in compare_figures(reference, candidate) if r.metric in TARGETS]
        for row in rows:
            errors[row.metric].append(row.error)
        within.append(all(r.ok for r in rows))
    return Repeatability({m: tuple(v) for m, v in errors.items()}, tuple(within))


def leave_one_out(run: MeasuredRun) -> Repeatability | None:
    """Each recording of ``run`` against the pooled other recordings; None with one recording."""
    timelines = [r.timeline for r in run.recordings]
    if len(timelines) < 2:
        return None
    return _compared([(step_figures(*(t for j, t in enumerate(timelines) if j != i)), step_figures(own))
                      for i, own in enumerate(timelines)])


def against_each_recording(run: MeasuredRun, simulated: StepFigures) -> Repeatability:
    """The simulated figures against each recording of ``run`` alone (same errors and targets as
    :func:`leave_one_out`, with the simulation in place of the other recordings)."""
    return _compared([(step_figures(r.timeline), simulated) for r in run.recordings])
