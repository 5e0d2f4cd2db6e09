"""Measured-run analysis: parse traces, compute the shared metrics, summarize, report."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.hta_metrics import per_rank_breakdown
from profiler.kineto import ParsedRun, load_run
from profiler.measured import measured_step_s, measured_timeline, step_statistic
from schedules.layer_kinds import model_flops_per_step
from schedules.model import ModelSpec
from sim.metrics import StepMetrics, step_metrics
from sim.report.figures import timeline_figure
from sim.report.html import PlotlyJs, Report
from sim.summary import round_sig
from sim.timeline import Timeline

_RANK_PREFIX = re.compile(r"^rank (\d+): (.*)$", re.S)
RANK_KEYS = ("rank", "step_time_s", "span_s", "compute_fraction", "non_compute_fraction", "idle_fraction",
             "comm_s", "comm_overlap_fraction")


@dataclass(frozen=True)
class AnalysisResult:
    """A parsed run, its Timeline ready for metrics, the metrics and the JSON summary."""

    parsed: ParsedRun
    timeline: Timeline
    metrics: StepMetrics
    summary: dict[str, Any]


def analyze_run(path: str | Path, *, all_steps: bool = False) -> AnalysisResult:
    """Parse the run at ``path`` and compute every figure ``trainsim analyze`` prints."""
    parsed = load_run(path, all_steps=all_steps)
    tl = measured_timeline(parsed)
    metrics = step_metrics(tl)
    return AnalysisResult(parsed, tl, metrics, summarize_measured(str(path), parsed, tl, metrics))


def summarize_measured(name: str, parsed: ParsedRun, tl: Timeline, m: StepMetrics) -> dict[str, Any]:
    """The `simulate` keys that apply to a measured run, plus ``ranks`` and ``warnings``."""
    world = int(tl.meta.world_size or len(tl.ranks))
    step_s, steps = median_step_time(m)
    out: dict[str, Any] = {
        "run": name, "source": "measured", "world_size": world, "ranks_in_trace": len(tl.ranks),
        "step_time_s": round_sig(step_s),
        "step_time_statistic": step_statistic(steps),
        "trainer_step_time_s": _trainer_step_time(parsed),
        "tokens_per_s": None, "tflops_per_gpu": None,
        "bubble_fraction": round_sig(m.bubble_fraction),
        "exposed_comm_fraction": round_sig(m.exposed_comm_fraction),
        "comm_overlap_fraction": round_sig(m.comm_overlap_fraction),
        "steps": tl.steps, "backend": tl.meta.backend,
    }
    _add_throughput(out, parsed.manifest or {}, step_s, world)
    table = per_rank_breakdown(parsed)
    out["ranks"] = [{k: (round_sig(float(row[k])) if k != "rank" else int(row[k])) for k in RANK_KEYS}
                    for _, row in table.iterrows()]
    out["config"] = (parsed.manifest or {}).get("config")
    out["warnings"] = merge_rank_warnings(list(tl.meta.warnings))
    return out


def median_step_time(m: StepMetrics) -> tuple[float, int]:
    """The measured step time (:data:`profiler.measured.MEASURED_STEP`) of ``m``'s steps: (seconds,
    number of steps); the metrics' own step time when no step has a window."""
    found = measured_step_s(m.per_rank)
    return (m.step_time_s, 0) if found is None else found


def merge_rank_warnings(warnings: list[str]) -> list[str]:
    """Collapse "rank N: <same text>" lines into one "ranks 0-7: <text>" line, order kept."""
    grouped: dict[str, list[int]] = {}
    for w in warnings:
        m = _RANK_PREFIX.match(w)
        key, rank = (m.group(2), int(m.group(1))) if m else (w, -1)
        grouped.setdefault(key, []).append(rank)
    out = []
    for text, ranks in grouped.items():
        real = sorted(r for r in ranks if r >= 0)
        out.append(f"{_rank_label(real)}: {text}" if real else text)
    return out


def _rank_label(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else "ranks " + ",".join(map(str, ranks))


def _trainer_step_time(parsed: ParsedRun) -> float | None:
    """The trainer's own wall-clock time of the analyzed steps (median, like ``step_time_s``), if recorded."""
    manifest = parsed.manifest or {}
    times, profiled = manifest.get("step_times_s"), manifest.get("profiled_steps")
    if not times or not profiled:
        return None
    steps = [s for s in parsed.timeline.steps if 0 <= s < len(times)]
    return round_sig(statistics.median(times[s] for s in steps)) if steps else None


def _add_throughput(out: dict[str, Any], manifest: dict[str, Any], step_s: float, world: int) -> None:
    config = manifest.get("config") or {}
    model_fields = config.get("model")
    if not model_fields or "global_batch" not in config:
        return
    model = ModelSpec(**model_fields)
    flops = model_flops_per_step(model, int(config["global_batch"]))
    out["tokens_per_s"] = round_sig(int(config["global_batch"]) * model.seq_len / step_s)
    out["tflops_per_gpu"] = round_sig(flops / step_s / world / 1e12)


def write_measured_report(result: AnalysisResult, path: str | Path, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
    """Summary, per-rank table and the measured timeline."""
    s = result.summary
    rep = Report(f"trainsim — measured run {s['run']}")
    rep.table([{k: s[k] for k in ("world_size", "step_time_s", "trainer_step_time_s", "bubble_fraction",
                                  "exposed_comm_fraction", "comm_overlap_fraction")}])
    rep.heading("Per rank (Holistic Trace Analysis definitions)")
    rep.table(s["ranks"])
    rep.heading("Timeline")
    rep.figure(timeline_figure(result.timeline, "Measured step"))
    for w in s["warnings"]:
        rep.note("warning: " + w)
    return rep.write(path, plotly_js)
