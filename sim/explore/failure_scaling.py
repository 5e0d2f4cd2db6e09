"""Failure-aware scaling for explore ``--reliability``: per design and GPU count, the plan with
the fewest expected days once failures, checkpoints and restarts are counted (:mod:`sim.explore.failures`),
its days and dollars with and without failures, and how much of the ideal speed-up a doubling of
the GPUs still buys (at scale the interruption rate grows with the nodes, so it buys less than
half the days). Units: days, US dollars, GPUs. Its figure: :mod:`sim.explore.failure_figure`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sim.explore.display import usd
from sim.explore.rank import COST, TIME, Row, best_per_design, describe_plan

SCALING_FORMATS: dict[str, Callable[[Any], str]] = {"free_cost": usd, "cost": usd, "speedup_vs_prev": "{:.2f}x".format,
                                                   "gpus_ratio": "{:g}x".format}


def is_failure_aware(rows: Sequence[Row]) -> bool:
    """Rows ranked with failures counted (:func:`sim.explore.failures.with_failures`)."""
    return bool(rows) and all("ettr" in r for r in rows)


def scaling_rows(rows: Sequence[Row]) -> list[Row]:
    """The fewest expected days per (design, GPU count): designs in order of their fastest plan,
    GPUs ascending within each design."""
    best = best_per_design(rows, 1, key=TIME)
    order = {d: i for i, d in enumerate(dict.fromkeys(r["design"] for r in best))}
    return sorted(best, key=lambda r: (order[r["design"]], r["gpus"]))


def scaling_table(rows: Sequence[Row]) -> list[dict[str, object]]:
    """:func:`scaling_rows` as a table: days and dollars without and with failures, ETTR,
    interruptions, and ``doubling_speedup``: the expected days at the design's next smaller GPU
    count over these (2.0 at half the GPUs would be perfect scaling)."""
    out: list[dict[str, object]] = []
    prev: dict[str, Row] = {}
    for r in scaling_rows(rows):
        last = prev.get(r["design"])
        speedup = last[TIME] / r[TIME] if last is not None else None
        out.append({"design": r["design"], "gpus": r["gpus"], "plan": describe_plan(r),
                    "free_days": r["failure_free_days"], "days": r[TIME], "p10_days": r["days_p10"],
                    "p90_days": r["days_p90"], "ettr": r["ettr"], "interruptions": r["interruptions"],
                    "checkpoint_s": r["checkpoint_interval_s"], "free_cost": r["failure_free_cost_usd"],
                    "cost": r[COST], "speedup_vs_prev": speedup,
                    "gpus_ratio": r["gpus"] / last["gpus"] if last is not None else None})
        prev[r["design"]] = r
    return out


def failure_summary(rows: Sequence[Row], note: str) -> dict[str, object]:
    """What explore's summary (``--json``) adds with failures counted: the note naming the
    reliability inputs and :func:`scaling_table`."""
    return {"failures": note, "failure_scaling": scaling_table(rows)}
