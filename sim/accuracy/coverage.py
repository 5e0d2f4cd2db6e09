"""How often the band holds the measured step: leave-one-source-out over the published runs.

Each run's band is built from the runs of every other source (:func:`sim.accuracy.band.error_band`
with ``exclude_source``), so no run vouches for itself or for its siblings; coverage = the share
of runs whose measured step lies inside their band. An 80% band is honest when that share is
near 80% (the acceptance asks 70-90%).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.accuracy.band import Band, error_band
from sim.accuracy.residuals import Residual


@dataclass(frozen=True, kw_only=True)
class Held:
    """One run's leave-one-source-out band and whether its measurement falls inside."""

    residual: Residual
    band: Band | None

    @property
    def covered(self) -> bool:
        ratio = self.residual.measured_s / self.residual.sim_s
        return self.band is not None and self.band.low <= ratio <= self.band.high


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """Runs, runs inside their band, and runs whose band rests on comparable runs."""

    group: str
    runs: int
    covered: int
    comparable: int

    @property
    def fraction(self) -> float:
        return self.covered / self.runs if self.runs else 0.0


def held_out(residuals: Sequence[Residual]) -> list[Held]:
    """Every run with its band from the other sources' runs."""
    return [Held(residual=r, band=error_band(r.job, residuals, exclude_source=r.source)) for r in residuals]


def coverage_by(held: Sequence[Held], key: Callable[[Residual], str]) -> list[Coverage]:
    """Coverage per group (``key`` of each run) and, last, over all runs ("all")."""
    groups = sorted({key(h.residual) for h in held})
    return [*(_coverage(g, [h for h in held if key(h.residual) == g]) for g in groups), _coverage("all", held)]


def _coverage(group: str, held: Sequence[Held]) -> Coverage:
    return Coverage(group=group, runs=len(held), covered=sum(h.covered for h in held),
                    comparable=sum(h.band is not None and h.band.comparable for h in held))
