"""An honest error band on a predicted step time, from the residuals of comparable published runs.

For a job with features c (:class:`sim.accuracy.job_class.JobClass`) the band rests on the
published runs of the first tier of :data:`TIERS` that holds at least :data:`MIN_ROWS` runs from
at least :data:`MIN_SOURCES` sources; their log ratios q = ln(measured / simulated) give the 80%
prediction interval of the measured step of a run from a source not among them:

    measured in  simulated x exp(centre +- t(0.9, S-1) x sd)

Runs of one source share their errors (one stack, one cluster, one way of counting), so the
interval is that of a one-way random-effects model, q = mu + a_source + e_run, for a new source's
run (:func:`new_source_spread`): ``centre`` the mean of the S source means, ``sd`` the square root of
between-source variance + within-source variance + the centre's own variance, with S - 1 degrees
of freedom (the sources, not the runs, are the independent draws). With one run per source it is
the plain t prediction interval of the n log ratios. So a class the model predicts too fast gets
a band above the point estimate, and a few scattered sources a wide one. Only tiers 1-2 count as
comparable; a band from tier 3-4, or from every run when no tier qualifies, says so
(``comparable`` False). ``exclude_source`` leaves one source out, so that, evaluated on a
published row, the row never vouches for itself (:mod:`sim.accuracy.coverage`).
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
MIN_SOURCES = 3  # the band's degrees of freedom are sources - 1: two sources give t(0.9, 1) = 3.08, a band
# the tail of one quantile decides (on the published runs, leave-one-source-out: 2 -> coverage 83%, widest
# band x2.11; 3 -> 80%, widest x1.54)
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
    by_source: dict[str, list[float]] = {}
    for r in rows:
        by_source.setdefault(r.source, []).append(r.log_ratio)
    centre, sd, dof = new_source_spread(list(by_source.values()))
    half = t_quantile((1 + CONFIDENCE) / 2, dof) * sd
    return Band(low=math.exp(centre - half), high=math.exp(centre + half), confidence=CONFIDENCE,
                runs=tuple(r.name for r in rows), sources=tuple(sorted(by_source)),
                basis=f"{len(rows)} published runs ({len(by_source)} sources): {basis}",
                comparable=comparable)


def new_source_spread(groups: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """(centre, sd, degrees of freedom) of the next value of a new group, from values in groups
    (at least two groups): the one-way random-effects model x = mu + a_group + e, its variance
    components by the method of moments (Searle, Casella and McCulloch, *Variance Components*,
    sec. 3.5, unbalanced ANOVA estimators, the between-group one from the spread of the group
    means). ``centre`` = the mean of the group means; within = the pooled within-group variance;
    between = var(group means) - within x mean(1 / group size), at least 0; sd^2 = between + within
    + var(group means) / groups (the new value's own spread and the centre's); dof = groups - 1.
    Groups of one value each give the t prediction interval of those values (sd^2 = var (1 + 1/n))."""
    means = [statistics.fmean(g) for g in groups]
    s = len(groups)
    n = sum(len(g) for g in groups)
    within = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g) / (n - s) if n > s else 0.0
    spread = statistics.variance(means)
    between = max(0.0, spread - within * statistics.fmean(1 / len(g) for g in groups))
    return statistics.fmean(means), math.sqrt(between + within + spread / s), s - 1


def t_quantile(p: float, dof: int) -> float:
    """The Student t quantile of probability ``p`` (0 < p < 1) with ``dof`` >= 1 degrees of
    freedom: the root of the distribution function, exact for integer dof (Abramowitz and Stegun
    26.7.3-26.7.4, the finite series in cos(theta)), found by bisection to 1e-12."""
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    target = 2 * p - 1  # P(|T| <= t)
    lo, hi = 0.0, 1.0
    while _t_central(hi, dof) < target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_central(mid, dof) < target else (lo, mid)
    return (lo + hi) / 2


def _t_central(t: float, dof: int) -> float:
    """P(|T| <= t) for Student's t with ``dof`` degrees of freedom (A&S 26.7.3 odd, 26.7.4 even)."""
    theta = math.atan(t / math.sqrt(dof))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if dof % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... to cos^(dof-3)))
        if dof == 1:
            return 2 * theta / math.pi
        term = total = 1.0
        for k in range(1, (dof - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term = total = 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... to cos^(dof-2))
    for k in range(1, (dof - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total
