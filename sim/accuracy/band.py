"""An honest error band on a predicted step time, from the residuals of comparable published runs.

For a job with features c (:class:`sim.accuracy.job_class.JobClass`) the band rests on the
published runs of the first tier of :data:`TIERS` that holds at least :data:`MIN_ROWS` runs from
at least :data:`MIN_SOURCES` sources; their log ratios q = ln(measured / simulated) give the 80%
prediction interval of the measured step (normal residuals, Student t, n runs):

    measured in  simulated x exp(mean(q) +- t(0.9, n-1) x sd(q) x sqrt(1 + 1/n))

so a class the model predicts too fast gets a band above the point estimate, and a few scattered
runs a wide one. Only tiers 1-2 count as comparable; a band from tier 3-4, or from every run when
no tier qualifies, says so (``comparable`` False). ``exclude_source`` leaves one source out, so
that, evaluated on a published row, the row never vouches for itself (:mod:`sim.accuracy.coverage`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.accuracy.job_class import JobClass
from sim.accuracy.residuals import Residual

CONFIDENCE = 0.8
MIN_ROWS = 5
MIN_SOURCES = 2
MAX_SCALE_FACTOR = 8  # tier 1: within this factor of the job's GPU count

Match = Callable[[JobClass, JobClass], bool]
TIERS: tuple[tuple[str, Match, bool], ...] = (
    ("same precision, GPU generation and parallelism class, within 8x the GPUs",
     lambda a, b: a.precision == b.precision and a.generation == b.generation and a.parallelism == b.parallelism
     and a.scale_distance(b) <= math.log2(MAX_SCALE_FACTOR), True),
    ("same precision and parallelism class",
     lambda a, b: a.precision == b.precision and a.parallelism == b.parallelism, True),
    ("same precision and GPU generation", lambda a, b: a.precision == b.precision and a.generation == b.generation,
     False),
    ("same precision", lambda a, b: a.precision == b.precision, False),
)
"""(description, match, comparable) from the closest to the loosest."""


@dataclass(frozen=True, kw_only=True)
class Band:
    """The interval of the measured step time, as factors of the simulated one.

    Attributes:
        low, high: multiply the simulated step time by these for the band's ends.
        confidence: the interval's nominal coverage (0.8).
        runs: names of the published runs it rests on.
        sources: their distinct sources.
        basis: which runs (the tier's description, or that none is comparable).
        comparable: the runs share the job's precision and parallelism class (tiers 1-2).
    """

    low: float
    high: float
    confidence: float
    runs: tuple[str, ...]
    sources: tuple[str, ...]
    basis: str
    comparable: bool


def error_band(job: JobClass, residuals: Sequence[Residual], exclude_source: str | None = None) -> Band | None:
    """The band for ``job`` (None when there are fewer than :data:`MIN_ROWS` residuals at all)."""
    pool = [r for r in residuals if r.source != exclude_source]
    for basis, match, comparable in TIERS:
        chosen = [r for r in pool if match(job, r.job)]
        if _enough(chosen):
            return _band(chosen, basis, comparable)
    if not _enough(pool):
        return None
    return _band(pool, f"no comparable published run ({job.precision}, {job.parallelism}); every run", False)


def _enough(rows: Sequence[Residual]) -> bool:
    return len(rows) >= MIN_ROWS and len({r.source for r in rows}) >= MIN_SOURCES


def _band(rows: Sequence[Residual], basis: str, comparable: bool) -> Band:
    q = [r.log_ratio for r in rows]
    n = len(q)
    half = t_quantile((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(q) * math.sqrt(1 + 1 / n)
    centre = statistics.fmean(q)
    return Band(low=math.exp(centre - half), high=math.exp(centre + half), confidence=CONFIDENCE,
                runs=tuple(r.name for r in rows), sources=tuple(sorted({r.source for r in rows})),
                basis=f"{n} published runs ({len({r.source for r in rows})} sources): {basis}",
                comparable=comparable)


def t_quantile(p: float, dof: int) -> float:
    """Student t quantile by the Cornish-Fisher expansion around the normal quantile (Abramowitz
    and Stegun 26.7.5; within 0.2% of the tables from 4 degrees of freedom)."""
    z = statistics.NormalDist().inv_cdf(p)
    v = float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))
