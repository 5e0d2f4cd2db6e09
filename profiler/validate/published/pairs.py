"""FP8/BF16 twins: the measured FP8 speedup of a pair against the simulated one.

A pair is two rows of the same run in the two precisions (each row's ``pair`` names the other).
Speedup = FP8 throughput / BF16 throughput: measured, the rows' ``measured_fp8_speedup``;
simulated, the FP8 twin's simulated tokens/s per GPU over the BF16 twin's (tokens, not steps, so
twins tuned to different micro-batch sizes compare fairly). ``speedup_err`` = simulated - measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from profiler.validate.published.run import RowResult


@dataclass(frozen=True)
class PairResult:
    """One FP8/BF16 pair: names, measured and simulated speedups (None: a twin was not simulated)."""

    bf16: str
    fp8: str
    measured: float
    simulated: float | None
    ratio_only: bool

    @property
    def speedup_err(self) -> float | None:
        """Simulated minus measured speedup (a difference of ratios, not a percentage)."""
        return None if self.simulated is None else self.simulated - self.measured


@dataclass(frozen=True)
class PairSummary:
    """Pairs compared, the median and largest |speedup error| (all pairs, and those whose
    settings are stated: not ``ratio_only``)."""

    pairs: int
    median_abs_err: float
    max_abs_err: float
    stated_pairs: int
    stated_median_abs_err: float | None
    stated_max_abs_err: float | None


def pair_results(results: Sequence[RowResult]) -> list[PairResult]:
    """The file's pairs in file order (one entry per pair, keyed by its FP8 row)."""
    by_name = {r.row.name: r for r in results}
    out = []
    for r in results:
        twin = by_name.get(r.row.pair or "")
        if twin is None or not _is_fp8(r) or _is_fp8(twin) or r.row.measured_fp8_speedup is None:
            continue
        fp8, bf16 = r.sim_tokens_per_s_per_gpu, twin.sim_tokens_per_s_per_gpu
        simulated = None if fp8 is None or bf16 is None else fp8 / bf16
        out.append(PairResult(bf16=twin.row.name, fp8=r.row.name, measured=r.row.measured_fp8_speedup,
                              simulated=simulated, ratio_only=r.row.ratio_only or twin.row.ratio_only))
    return out


def summarize_pairs(pairs: Sequence[PairResult]) -> PairSummary | None:
    """Aggregate |speedup error| over the simulated pairs (None: no pair was simulated)."""
    errors = [abs(p.speedup_err) for p in pairs if p.speedup_err is not None]
    stated = [abs(p.speedup_err) for p in pairs if p.speedup_err is not None and not p.ratio_only]
    if not errors:
        return None
    return PairSummary(pairs=len(errors), median_abs_err=statistics.median(errors), max_abs_err=max(errors),
                       stated_pairs=len(stated), stated_median_abs_err=statistics.median(stated) if stated else None,
                       stated_max_abs_err=max(stated) if stated else None)


def _is_fp8(r: RowResult) -> bool:
    return r.row_job is not None and r.row_job.job.plan.dtype == "fp8" or (r.row.dtype or "").startswith("fp8")
