"""The command's outputs as data: the ``--json`` object and the terminal table's rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler.validate.published.notes import Note
from profiler.validate.published.pairs import PairResult, PairSummary, pair_results, summarize_pairs
from profiler.validate.published.run import (
    MFU_DEFINITION,
    RESERVED_DEFINITION,
    SIM_MEMORY_KIND,
    RowResult,
)
from profiler.validate.published.summary import ErrorStats, Summary
from sim.summary import round_sig

DIGITS = 6


def _r(x: float | None) -> float | None:
    return None if x is None else round_sig(x, DIGITS)


def run_object(r: RowResult, timings: bool = False) -> dict[str, Any]:
    """One row of ``--json`` (``sim_wall_s`` only with ``timings``: it differs between runs)."""
    row = r.row
    sim_step = r.sim.step_s if r.sim else None
    out: dict[str, Any] = {
        "name": row.name, "family": row.family, "gpus": row.gpus, "skipped": r.skipped, "reason": r.reason,
        "measured_step_s": _r(row.measured_step_s), "sim_step_s": _r(sim_step), "step_err": _r(r.step_err),
        "measured_tokens_per_s_per_gpu": _r(row.measured_tokens_per_s_per_gpu),
        "sim_tokens_per_s_per_gpu": _r(r.sim_tokens_per_s_per_gpu),
        "measured_mfu": _r(r.mfu(row.measured_step_s)), "sim_mfu": _r(r.mfu(sim_step)),
        "published_mfu": _r(row.measured_mfu), "published_mfu_formula": row.mfu_formula,
        "measured_peak_memory_gib": _r(row.measured_peak_memory_gib),
        "sim_peak_memory_gib": _r(r.sim_peak_memory_gib), "memory_err": _r(r.memory_err),
        "memory_kind": r.memory_kind, "sim_memory_kind": r.sim_memory_kind if r.sim else None,
        "sim_allocated_gib": _r(r.sim_allocated_gib), "sim_reserved_gib": _r(r.sim_reserved_gib), "sim_fits_hbm": r.sim.fits_hbm if r.sim else None,
        "assumed": _notes(r.assumed), "approx": _notes(r.approx),
    }
    if timings:
        out["sim_wall_s"] = _r(r.sim.wall_s) if r.sim else None
    return out


def _notes(notes: Sequence[Note]) -> dict[str, str]:
    return {n.code: n.text for n in notes}


def _stats(s: ErrorStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"rows": s.rows, "mape": _r(s.mape), "mean_err": _r(s.mean_err), "min_err": _r(s.min_err),
            "max_err": _r(s.max_err)}


def json_object(results: Sequence[RowResult], summary: Summary, file: str, timings: bool = False) -> dict[str, Any]:
    """The ``--json`` object: stable keys, rounded numbers (byte-identical without ``timings``)."""
    step = summary.step
    worst = summary.worst
    return {
        "runs": [run_object(r, timings) for r in results],
        "mape": _r(step.mape) if step else None,
        "worst": None if worst is None else {"name": worst[0], "step_err": _r(worst[1])},
        "mean_step_err": _r(step.mean_err) if step else None,
        "file": file, "rows": summary.rows, "expressed": summary.expressed, "skipped": summary.skipped,
        "families": {f: _stats(s) for f, s in summary.families.items()},
        "memory": _stats(summary.memory),
        **pairs_object(pair_results(results)),
        "definitions": {"step_err": "(simulated - measured) / measured", "mfu": MFU_DEFINITION,
                        "sim_peak_memory": "in the measured figure's kind (sim_memory_kind): "
                                           f"{SIM_MEMORY_KIND}, the highest modelled bytes of any simulated rank; "
                                           f"reserved, {RESERVED_DEFINITION}"},
    }


def pairs_object(pairs: Sequence[PairResult]) -> dict[str, Any]:
    """``pairs`` (each FP8/BF16 twin: measured and simulated speedup) and ``pair_summary``."""
    summary = summarize_pairs(pairs)
    return {"pairs": [{"bf16": p.bf16, "fp8": p.fp8, "measured_speedup": _r(p.measured),
                       "sim_speedup": _r(p.simulated), "speedup_err": _r(p.speedup_err),
                       "ratio_only": p.ratio_only} for p in pairs],
            "pair_summary": None if summary is None else _pair_stats(summary)}


def _pair_stats(s: PairSummary) -> dict[str, Any]:
    return {"pairs": s.pairs, "median_abs_speedup_err": _r(s.median_abs_err),
            "max_abs_speedup_err": _r(s.max_abs_err), "stated_pairs": s.stated_pairs,
            "stated_median_abs_speedup_err": _r(s.stated_median_abs_err),
            "stated_max_abs_speedup_err": _r(s.stated_max_abs_err)}


def pair_rows(pairs: Sequence[PairResult]) -> list[dict[str, str]]:
    """The terminal table of FP8/BF16 pairs."""
    return [{"pair (fp8 row)": p.fp8, "measured": f"{p.measured:.3f}", "sim": _num(p.simulated, ".3f"),
             "sim - measured": _num(p.speedup_err, "+.3f"), "settings": "unstated (ratio only)" if p.ratio_only
             else "stated"} for p in pairs]


def pair_line(pairs: Sequence[PairResult]) -> str | None:
    """One line: pairs compared and the |speedup error| median and maximum (stated pairs apart)."""
    s = summarize_pairs(pairs)
    if s is None:
        return None
    line = f"FP8/BF16 speedup: {s.pairs} pairs, |sim - measured| median {s.median_abs_err:.3f}, max {s.max_abs_err:.3f}"
    if s.stated_pairs and s.stated_median_abs_err is not None and s.stated_max_abs_err is not None:
        line += (f"; {s.stated_pairs} with stated settings: median {s.stated_median_abs_err:.3f}, "
                 f"max {s.stated_max_abs_err:.3f}")
    return line


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def _num(x: float | None, spec: str) -> str:
    return "" if x is None else format(x, spec)


def _count(x: float | None) -> str:
    """A rate or count: whole numbers from 100 up, else 4 significant digits."""
    return "" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.4g}"


def table_rows(results: Sequence[RowResult], timings: bool = False) -> list[dict[str, str]]:
    """The terminal table: one row per simulated run (skipped runs are listed apart)."""
    out = []
    for r in results:
        if r.sim is None:
            continue
        row = r.row
        item = {
            "run": row.name, "gpus": str(row.gpus), "step_s": _num(row.measured_step_s, ".4g"),
            "sim_s": _num(r.sim.step_s, ".4g"), "err": _pct(r.step_err),
            "tok/s/gpu": _count(row.measured_tokens_per_s_per_gpu), "sim_tok/s": _count(r.sim_tokens_per_s_per_gpu),
            "mfu": _num(r.mfu(row.measured_step_s), ".3f"), "sim_mfu": _num(r.mfu(r.sim.step_s), ".3f"),
            "pub_mfu": _num(row.measured_mfu, ".3f"), "fits": "yes" if r.sim.fits_hbm else "NO",
            "assumed": ", ".join(n.code for n in r.assumed), "approx": ", ".join(n.code for n in r.approx),
        }
        if timings:
            item["wall_s"] = f"{r.sim.wall_s:.2f}"
        out.append(item)
    return out


def memory_rows(results: Sequence[RowResult]) -> list[dict[str, str]]:
    """Rows that publish a peak memory: measured (as the row defines it) vs simulated in that kind."""
    return [{"run": r.row.name, "measured": r.memory_kind or "", "mem_gib": _num(r.row.measured_peak_memory_gib, ".3g"),
             "sim_gib": _num(r.sim_peak_memory_gib, ".3g"), "mem_err": _pct(r.memory_err),
             "sim_allocated_gib": _num(r.sim_allocated_gib, ".3g")}
            for r in results if r.memory_err is not None]


def family_rows(summary: Summary) -> list[dict[str, str]]:
    """Per family: rows, mean signed error, MAPE, range."""
    return [{"family": f, "rows": str(s.rows), "mean_err": _pct(s.mean_err), "mape": f"{s.mape:.1%}",
             "range": f"{_pct(s.min_err)} … {_pct(s.max_err)}"} for f, s in summary.families.items()]


def summary_line(summary: Summary) -> str:
    """One line: rows expressed and skipped, MAPE, mean signed error, worst row, memory."""
    parts = [f"{summary.expressed}/{summary.rows} rows simulated, {summary.skipped} skipped"]
    if summary.step is not None and summary.worst is not None:
        parts.append(f"step time MAPE {summary.step.mape:.1%}, mean signed {_pct(summary.step.mean_err)}, "
                     f"worst {summary.worst[0]} {_pct(summary.worst[1])}")
    if summary.memory is not None:
        rows = f"{summary.memory.rows} row" + ("s" if summary.memory.rows != 1 else "")
        parts.append(f"peak memory ({rows}) MAPE {summary.memory.mape:.1%}, "
                     f"mean signed {_pct(summary.memory.mean_err)}")
    return "; ".join(parts)


def legend_lines(results: Sequence[RowResult]) -> list[str]:
    """The distinct assumption/approximation notes behind the table's codes."""
    seen: dict[tuple[str, str], None] = {}
    for r in results:
        for kind, notes in (("assumed", r.assumed), ("approx", r.approx)):
            for n in notes:
                seen[(f"{kind} {n.code}", n.text)] = None
    return [f"{code}: {text}" for code, text in sorted(seen)]
