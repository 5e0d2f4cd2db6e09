"""``ParsedRun``: the measured Timeline of a run plus the raw facts that replay needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.timeline_meta import Source, TimelineMeta
from profiler.kineto.malformed import as_json
from profiler.kineto.rank import RankData
from profiler.kineto.spans import SpanCols, concat_spans, take
from sim.timeline import (
    CATEGORY_COLUMNS,
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    STRING_COLUMNS,
    Timeline,
)

STEP_COLUMNS = ("rank", "profiler_step", "step", "start_s", "end_s", "dur_s", "kept")
RAW_COLUMNS = ("profiler_step", "device", "stream", "correlation", "launch_s", "launch_tid", "pg",
               "pg_ranks", "seq", "source", "row")
CLOCK_NOTE = ("absolute host clock per rank (ts + baseTimeNanoseconds); ranks aligned on it "
              "with no clock-skew correction")
STEP_TIME_NOTE = ("step_time_s = duration of the ProfilerStep#N CPU range on the main thread, "
                  "averaged over kept steps")


@dataclass
class ParsedRun:
    """A parsed run.

    Attributes:
        timeline: the measured Timeline (meta: source, world_size, ranks, steps, warnings...).
        raw: one row per Timeline span (same order): profiler_step, device (GPU index, -1 on
            CPU), stream (CUDA stream or CPU thread id), correlation (CPU<->GPU link id, -1),
            launch_s (CPU launch or call time of GPU kernels / gloo transfers, NaN),
            launch_tid, pg and pg_ranks (process group name and "[..]" ranks, "" if unknown),
            seq (0-based order of the collective within its group on its rank, -1), source
            (kernel, gpu_memcpy, gpu_memset, nccl_kernel, cpu_op, gloo_call, gloo_work), row
            (event index among the kept events of the rank's file).
        steps: one row per (rank, profiler step): profiler_step, step (label), start_s,
            end_s, dur_s, kept.
        process_groups: rank, name, desc, ranks, size (from distributedInfo.pg_config).
        files: rank -> trace file.
        manifest: the run's manifest.json, {} if none.
    """

    timeline: Timeline
    raw: pd.DataFrame
    steps: pd.DataFrame
    process_groups: pd.DataFrame
    files: dict[int, Path] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """What was skipped or assumed while parsing."""
        return list(self.timeline.meta.warnings)


def _shifts_us(ranks: list[RankData]) -> dict[int, float]:
    """Per-rank offset (µs) putting every file on the clock of the smallest baseTimeNanoseconds."""
    base0 = min(r.base_ns for r in ranks)
    return {r.rank: (r.base_ns - base0) / 1000.0 for r in ranks}


def _step_labels(r: RankData) -> dict[int, int]:
    """ProfilerStep number -> Timeline step label (the trainsim step inside it, else N)."""
    return {int(n): int(t) if t >= 0 else int(n)
            for n, t in zip(r.steps.number, r.steps.trainsim_step, strict=True)}


def _label_steps(pstep: np.ndarray, labels: dict[int, int]) -> np.ndarray:
    """Vectorised ``labels.get(p, -1)`` over profiler step numbers."""
    out = np.full(pstep.size, -1, dtype=np.int64)
    if not labels:
        return out
    keys = np.array(sorted(labels), dtype=np.int64)
    vals = np.array([labels[k] for k in keys], dtype=np.int64)
    pos = np.clip(np.searchsorted(keys, pstep), 0, keys.size - 1)
    hit = keys[pos] == pstep
    out[hit] = vals[pos[hit]]
    return out


def _frame(ranks: list[RankData], keep: dict[int, np.ndarray], shift: dict[int, float],
           t0: float) -> pd.DataFrame:
    parts: list[SpanCols] = []
    rank_col, label_col = [], []
    for r in ranks:
        s = take(r.spans, keep[r.rank])
        labels = _step_labels(r)
        parts.append(s)
        rank_col.append(np.full(s["pstep"].size, r.rank, dtype=np.int64))
        label_col.append(_label_steps(s["pstep"], labels))
        for col in ("start_us", "end_us", "launch_us"):
            s[col] = (s[col] + shift[r.rank] - t0) * 1e-6
    sp = concat_spans(parts)
    data: dict[str, Any] = {
        "rank": np.concatenate(rank_col) if rank_col else np.empty(0, np.int64),
        "lane": sp["lane"], "kind": sp["kind"], "name": sp["name"],
        "start_s": sp["start_us"], "end_s": sp["end_us"],
        "step": np.concatenate(label_col) if label_col else np.empty(0, np.int64),
        "stage": sp["stage"], "chunk": sp["chunk"], "microbatch": sp["microbatch"],
        "layer": sp["layer"], "bytes": sp["bytes"], "flops": np.zeros(sp["bytes"].size),
        "group": _group_keys(sp), "profiler_step": sp["pstep"], "device": sp["device"],
        "stream": sp["stream"], "correlation": sp["correlation"], "launch_s": sp["launch_us"],
        "launch_tid": sp["launch_tid"], "pg": sp["pg"], "pg_ranks": sp["pg_ranks"],
        "seq": sp["seq"], "source": sp["source"], "row": sp["row"],
    }
    for c in INT_COLUMNS:
        data[c] = np.asarray(data[c], dtype=np.int64)
    for c in FLOAT_COLUMNS:
        data[c] = np.asarray(data[c], dtype=np.float64)
    for c in STRING_COLUMNS:
        data[c] = np.asarray(data[c], dtype=object)
    for c in CATEGORY_COLUMNS:
        data[c] = pd.Categorical(np.asarray(data[c], dtype=object))
    df = pd.DataFrame(data)
    return df.sort_values(["rank", "start_s", "end_s", "lane"], kind="stable").reset_index(drop=True)


def _group_keys(sp: SpanCols) -> np.ndarray:
    """Timeline ``group``: the collective instance key "<pg>#<seq>" ("#<seq>" if pg unknown)."""
    out = np.full(sp["seq"].size, "", dtype=object)
    has = sp["seq"] >= 0
    out[has] = [f"{pg}#{seq}" for pg, seq in zip(sp["pg"][has], sp["seq"][has], strict=True)]
    return out


def _steps_frame(ranks: list[RankData], kept: list[int], shift: dict[int, float], t0: float) -> pd.DataFrame:
    cols: dict[str, list[Any]] = {c: [] for c in STEP_COLUMNS}
    for r in ranks:
        labels = _step_labels(r)
        for n, s, e in zip(r.steps.number, r.steps.start, r.steps.end, strict=True):
            values = (r.rank, int(n), labels[int(n)], (s + shift[r.rank] - t0) * 1e-6,
                      (e + shift[r.rank] - t0) * 1e-6, (e - s) * 1e-6, int(n) in kept)
            for c, v in zip(STEP_COLUMNS, values, strict=True):
                cols[c].append(v)
    dtypes = (np.int64, np.int64, np.int64, np.float64, np.float64, np.float64, bool)
    return pd.DataFrame({c: np.asarray(cols[c], dtype=t) for c, t in zip(STEP_COLUMNS, dtypes, strict=True)})


def _t0(ranks: list[RankData], keep: dict[int, np.ndarray], shift: dict[int, float]) -> float:
    firsts = []
    for r in ranks:
        starts = r.spans["start_us"][keep[r.rank]]
        if starts.size:
            firsts.append(float(starts.min()) + shift[r.rank])
        if r.steps.start.size:
            firsts.append(float(r.steps.start.min()) + shift[r.rank])
    return min(firsts) if firsts else 0.0


def _skipped(ranks: list[RankData]) -> dict[str, int]:
    """Events left out of the Timeline by category, summed over ranks (gpu_user_annotation...)."""
    total: dict[str, int] = {}
    for r in ranks:
        for cat, n in r.skipped.items():
            total[cat] = total.get(cat, 0) + n
    return dict(sorted(total.items()))


def _malformed(ranks: list[RankData]) -> dict[str, int]:
    """Malformed events skipped, by kind (``malformed.Skip``), summed over ranks."""
    total: dict[str, int] = {}
    for r in ranks:
        for key, n in as_json(r.malformed).items():
            total[key] = total.get(key, 0) + n
    return total


def assemble(ranks: list[RankData], keep: dict[int, np.ndarray], kept: list[int],
             dropped: list[int], world: int, manifest: dict[str, Any], warnings: list[str]) -> ParsedRun:
    """Join the ranks into one Timeline on the common clock and build the ParsedRun."""
    shift = _shifts_us(ranks)
    t0 = _t0(ranks, keep, shift)
    df = _frame(ranks, keep, shift, t0)
    steps = _steps_frame(ranks, kept, shift, t0)
    labels = sorted({int(s) for s in steps.loc[steps["kept"], "step"]})
    meta = TimelineMeta(
        source=Source.MEASURED, world_size=world, ranks=tuple(r.rank for r in ranks), steps_kept=tuple(labels),
        profiler_steps_kept=tuple(kept), profiler_steps_dropped=tuple(dropped),
        backend=",".join(sorted({r.backend for r in ranks if r.backend})),
        device_kind=",".join(sorted({r.device_kind for r in ranks})),
        devices={str(r.rank): r.device for r in ranks}, files={str(r.rank): r.path.name for r in ranks},
        skipped_events=_skipped(ranks), malformed_events=_malformed(ranks) if any(r.malformed for r in ranks) else None,
        t0_unix_us=min(r.base_ns for r in ranks) / 1000.0 + t0, clock=CLOCK_NOTE, step_time=STEP_TIME_NOTE,
        warnings=tuple(warnings))
    pgs = [{"rank": r.rank, **pg} for r in ranks for pg in r.process_groups]
    return ParsedRun(
        timeline=Timeline(df[list(COLUMNS)].copy(), meta), raw=df[list(RAW_COLUMNS)].copy(),
        steps=steps, process_groups=pd.DataFrame(pgs, columns=["rank", "name", "desc", "ranks", "size"]),
        files={r.rank: r.path for r in ranks}, manifest=manifest)
