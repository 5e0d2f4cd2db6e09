"""A recorded run for validation: its manifest and measured Timeline, and robust step figures.

A run directory holds either the raw Kineto traces (``rank*.json.gz``, parsed with
:func:`profiler.kineto.load_run`) or their compact form (``timeline.json.gz``,
:mod:`profiler.validate.store`), plus ``manifest.json``, and optionally further recordings of the
same configuration made at other times in ``repeat-<k>/`` subdirectories (same layout). Timing on
a shared machine is noisy, so each figure is the median over the profiled steps of every
recording of that step's value (step time: the slowest rank's window; bubble and exposed
communication: the step's mean over stages / ranks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.timeline_meta import StepWindow
from profiler.measured import measured_step_s, measured_timeline
from profiler.run_manifest import require_manifest
from profiler.validate.store import FILE_NAME, read_timeline
from sim import intervals
from sim.metrics import rank_step_table
from sim.timeline import Timeline


@dataclass(frozen=True)
class StepFigures:
    """Per-step medians of the compared figures (seconds, fractions)."""

    step_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    stage_busy_s: dict[int, float]  # pipeline rank -> compute busy seconds per step (mean over its ranks)
    steps: int


REPEAT_PREFIX = "repeat-"


@dataclass(frozen=True)
class Recording:
    """One recording of a configuration: its directory, manifest and measured Timeline."""

    path: Path
    manifest: dict[str, Any]
    timeline: Timeline


@dataclass(frozen=True)
class MeasuredRun:
    """A recorded run ready to compare: the main recording (its manifest and Timeline) and the
    further recordings of the same configuration, if any."""

    path: Path
    manifest: dict[str, Any]
    timeline: Timeline
    repeats: tuple[Recording, ...] = ()

    @property
    def recordings(self) -> tuple[Recording, ...]:
        """The main recording and its repeats, in order."""
        return (Recording(self.path, self.manifest, self.timeline), *self.repeats)


def repeat_directories(path: str | Path) -> list[Path]:
    """The ``repeat-<k>`` recordings inside a run directory, by k."""
    found = [d for d in Path(path).glob(f"{REPEAT_PREFIX}*") if d.is_dir() and d.name[len(REPEAT_PREFIX):].isdigit()]
    return sorted(found, key=lambda d: int(d.name[len(REPEAT_PREFIX):]))


def _load_recording(path: Path) -> Recording:
    manifest = require_manifest(path)
    if (path / FILE_NAME).is_file():
        return Recording(path, manifest, read_timeline(path))
    from profiler.kineto import load_run

    return Recording(path, manifest, measured_timeline(load_run(path)))


def load_measured(path: str | Path) -> MeasuredRun:
    """Read a run directory (raw traces or the stored timeline, plus ``manifest.json``) and its
    ``repeat-<k>`` recordings; a repeat of another configuration is a ValueError."""
    main = _load_recording(Path(path))
    repeats = tuple(_load_recording(d) for d in repeat_directories(path))
    for rep in repeats:
        if rep.manifest.get("config") != main.manifest.get("config"):
            raise ValueError(f"{rep.path}: a repeat must record the same configuration as {main.path}")
    return MeasuredRun(main.path, main.manifest, main.timeline, repeats)


def with_rank_windows(tl: Timeline, skip_steps: int = 0) -> Timeline:
    """A simulated Timeline with per-rank step windows as the trainer's ``ProfilerStep`` ranges
    are: rank r's step k runs from the end of its step k-1 (its last span) to the end of its step
    k, so a rank that finished early waits inside its next step (in a pipeline the last stage
    starts the next step while the first still drains). The first ``skip_steps`` steps are left
    out (their windows would start at 0 for every rank)."""
    df = tl.spans
    ends = df.groupby(["rank", "step"], observed=True)["end_s"].max()
    starts = df.groupby(["rank", "step"], observed=True)["start_s"].min()
    windows: list[StepWindow] = []
    for (rank, step), end in ends.items():
        prev = ends.get((rank, step - 1))
        start = float(prev) if prev is not None else float(starts[(rank, step)])
        if int(step) >= skip_steps:
            windows.append((int(rank), int(step), start, float(end)))
    return Timeline(df, dataclasses.replace(tl.meta, step_windows=tuple(windows)))


def step_figures(*timelines: Timeline) -> StepFigures:
    """Medians over the steps of every Timeline given (recordings of one configuration) of each
    step's figures."""
    per_step, tables = [], []
    for tl in timelines:
        table = rank_step_table(tl)
        if table.empty:
            raise ValueError("timeline has no spans inside any step")
        tables.append(table)
        per_step += [_one_step(part) for _, part in table.groupby("step", sort=True)]
    frame = pd.DataFrame(per_step)
    busy = pd.DataFrame([row["busy"] for row in per_step]).median().to_dict()
    step_s, _ = measured_step_s(*tables) or (float("nan"), 0)
    return StepFigures(step_time_s=step_s,
                       bubble_fraction=float(frame["bubble"].median()),
                       exposed_comm_fraction=float(frame["exposed"].median()),
                       stage_busy_s={int(k): float(v) for k, v in busy.items()}, steps=len(per_step))


def _one_step(part: pd.DataFrame) -> dict[str, Any]:
    """Figures of one step from its rows of :func:`sim.metrics.rank_step_table`."""
    idle = (part["idle_s"] / part["step_time_s"]).groupby(part["pp"]).mean()
    return {"bubble": float(idle.mean()),
            "exposed": float((part["exposed_comm_s"] / part["step_time_s"]).mean()),
            "busy": part.groupby("pp")["compute_s"].mean().to_dict()}


def lane_kind_seconds(tl: Timeline) -> pd.DataFrame:
    """Seconds per step and rank by (lane, kind): the length of the union of the spans of each
    (rank, step, lane, kind) (a measured call and the backend's span inside it, such as
    ``c10d::allreduce_`` and ``gloo:all_reduce``, count once), mean over ranks and steps."""
    df = tl.spans[tl.spans["step"] >= 0]
    if df.empty:
        return pd.DataFrame(columns=["lane", "kind", "seconds"])
    frame = pd.DataFrame({"rank": df["rank"].to_numpy(), "step": df["step"].to_numpy(),
                          "lane": df["lane"].astype(str), "kind": df["kind"].astype(str),
                          "start": df["start_s"].to_numpy(), "end": df["end_s"].to_numpy()})
    covered = frame.groupby(["rank", "step", "lane", "kind"], sort=True).apply(
        lambda g: intervals.total_length(g["start"].to_numpy(), g["end"].to_numpy()), include_groups=False)
    pairs = len(df[["rank", "step"]].drop_duplicates())
    out = covered.groupby(level=["lane", "kind"], sort=True).sum() / max(1, pairs)
    return out.rename("seconds").reset_index()


def median(values: list[float]) -> float:
    """Median of a non-empty list."""
    return float(np.median(np.asarray(values, dtype=float)))
