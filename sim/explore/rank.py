"""Ranking evaluated plans: the best per design, and the time-vs-cost Pareto front across designs.

Every function first drops rows whose peak memory exceeds the usable HBM (none should reach
here: pruning removes them before evaluation; this is the second line of defence).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sim.explore.display import count_short, display_rows, usd

Row = dict[str, Any]
TIME, COST = "time_to_train_days", "cost_usd"


def fitting(rows: Iterable[Row]) -> list[Row]:
    """Rows whose plan fits in memory."""
    return [r for r in rows if r["peak_memory_gib"] <= r["usable_hbm_gib"]]


def ranked(rows: Iterable[Row], key: str = TIME) -> list[Row]:
    """Fitting rows by ``key`` ascending (ties by cost, then id)."""
    return sorted(fitting(rows), key=lambda r: (r[key], r[COST], r["id"]))


def best_per_design(rows: Iterable[Row], n: int = 3, key: str = TIME) -> list[Row]:
    """The ``n`` best rows of every (design, GPU count), designs in order of their best row."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in ranked(rows, key):
        groups.setdefault((r["design"], r["gpus"]), []).append(r)
    return [r for group in groups.values() for r in group[:n]]


def to_verify(rows: Iterable[Row], n: int) -> list[Row]:
    """The ``n`` rows worth re-running on the engine: each design's fastest first (in order of
    speed), then the other rows by time."""
    order = ranked(rows)
    return list({r["id"]: r for r in [*best_per_design(order, 1), *order]}.values())[:max(0, n)]


def pareto_front(rows: Iterable[Row], x: str = TIME, y: str = COST) -> list[Row]:
    """Rows no other row beats on both ``x`` and ``y`` (lower is better), by ``x`` ascending;
    of rows with equal (x, y) the first by id is kept."""
    front: list[Row] = []
    best_y = float("inf")
    for r in sorted(fitting(rows), key=lambda r: (r[x], r[y], r["id"])):
        if r[y] < best_y:
            front.append(r)
            best_y = r[y]
    return front


def describe_plan(r: Row) -> str:
    """Short plan text: ``TP8 PP4 DP32 1f1b mbs1 Z1 SP rc=none`` (``EP8`` after DP under expert
    parallelism)."""
    vpp = f" v{r['vpp']}" if r["vpp"] > 1 else ""
    cp = f" CP{r['cp']}" if r["cp"] > 1 else ""
    sp = " SP" if r["sequence_parallel"] else ""
    ep = f" EP{r['ep']}" if r.get("ep", 1) > 1 else ""
    return (f"TP{r['tp']}{cp} PP{r['pp']} DP{r['dp']}{ep} {r['schedule']}{vpp} mbs{r['microbatch_size']} "
            f"Z{r['zero']}{sp} rc={r['recompute']}")


def table_rows(rows: Sequence[Row]) -> list[Row]:
    """The columns the CLI and report show for a ranked row (numbers; see :func:`shown`)."""
    return [{"design": r["design"], "gpus": r["gpus"], "plan": describe_plan(r), "step_s": r["step_time_s"],
             "step_80%": band_text(r), "tokens/s": r["tokens_per_s"], "mfu": r["mfu"], "days": r[TIME], "cost_usd": r[COST],
             "usd/gpu-h": r["price_per_gpu_hour_usd"], "usd/Mtok": r["usd_per_million_tokens"],
             "mem_gib": r["peak_memory_gib"], **_failure_columns(r)} for r in rows]


def band_text(r: Row) -> str:
    """The row's measured-step band as ``1.92-2.41`` (``~`` before it when it does not rest on
    comparable published runs; an em dash without one)."""
    if r.get("step_low_s") is None:
        return "—"
    return f"{'' if r['band_comparable'] else '~'}{r['step_low_s']:.3g}-{r['step_high_s']:.3g}"


def distinguishable(a: Row, b: Row) -> bool:
    """Whether plan ``a`` is faster than plan ``b`` beyond the model's error: ``a``'s band lies
    wholly below ``b``'s (their days scale with their steps). Without a band: by the estimate."""
    if a.get("step_low_s") is None or b.get("step_low_s") is None:
        return bool(a[TIME] < b[TIME])
    return bool(a[TIME] * a["step_high_s"] / a["step_time_s"] < b[TIME] * b["step_low_s"] / b["step_time_s"])


def _failure_columns(r: Row) -> Row:
    """With ``--reliability``: the failure-free days, ETTR and the P10/P90 days (sim.explore.failures)."""
    if "ettr" not in r:
        return {}
    return {"free_days": r["failure_free_days"], "ettr": r["ettr"], "p10_days": r["days_p10"], "p90_days": r["days_p90"]}


TABLE_FORMATS = {"tokens/s": count_short, "cost_usd": usd, "usd/gpu-h": usd, "usd/Mtok": usd}


def shown(rows: Sequence[Row]) -> list[Row]:
    """:func:`table_rows` as the terminal and the report print them (money as ``$707,300``)."""
    return display_rows(table_rows(rows), TABLE_FORMATS)
