"""Aggregate errors of the simulated rows: MAPE, mean signed error, the worst row, per family."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from profiler.validate.published.run import RowResult


@dataclass(frozen=True)
class ErrorStats:
    """Errors of a set of rows (fractions: 0.1 = 10%)."""

    rows: int
    mape: float  # mean of |err|
    mean_err: float  # mean of signed err
    min_err: float
    max_err: float


@dataclass(frozen=True)
class Summary:
    """The whole file's figures."""

    rows: int
    expressed: int
    skipped: int
    step: ErrorStats | None
    worst: tuple[str, float] | None  # (name, step_err) of the largest |step_err|
    families: dict[str, ErrorStats]
    memory: ErrorStats | None


def error_stats(errors: Sequence[float]) -> ErrorStats | None:
    """MAPE, mean, min and max of ``errors`` (None when empty)."""
    if not errors:
        return None
    return ErrorStats(rows=len(errors), mape=sum(abs(e) for e in errors) / len(errors),
                      mean_err=sum(errors) / len(errors), min_err=min(errors), max_err=max(errors))


def summarize(results: Sequence[RowResult]) -> Summary:
    """The summary of ``results`` (skipped rows count only in ``rows`` and ``skipped``)."""
    steps = [(r.row.name, r.row.family, r.step_err) for r in results if r.step_err is not None]
    worst = max(steps, key=lambda s: (abs(s[2]), s[0]), default=None)
    families = sorted({f for _, f, _ in steps})
    memory = [r.memory_err for r in results if r.memory_err is not None]
    return Summary(
        rows=len(results), expressed=len(steps), skipped=sum(r.skipped for r in results),
        step=error_stats([e for _, _, e in steps]), worst=None if worst is None else (worst[0], worst[2]),
        families={f: s for f in families if (s := error_stats([e for _, g, e in steps if g == f])) is not None},
        memory=error_stats(memory))
