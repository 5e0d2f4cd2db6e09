"""A parsed run's Timeline made ready for the shared metrics: pipeline ranks and step windows.

The simulator's metrics (:mod:`sim.metrics`) average the bubble over pipeline stages and measure
each rank inside its step window. For a measured run the stage of a rank comes from the run's
manifest (the trainer's device mesh), and each rank's window is its own ``ProfilerStep`` range:
ranks do not start a step together.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from profiler.kineto.parsed import ParsedRun
from sim.timeline import Timeline

MEASURED_STEP = ("the median over the kept profiler steps of the longest rank's step window "
                 "(its ProfilerStep range)")
"""The one definition of a recording's measured step time, which ``profile``, ``analyze``,
``validate`` and ``replay`` all print (as ``step_time_s``, with :func:`step_statistic`)."""


def measured_step_s(*per_rank: pd.DataFrame) -> tuple[float, int] | None:
    """:data:`MEASURED_STEP` of one recording, or of several recordings of a configuration (their
    steps pooled): each table has ``step`` and ``step_time_s`` per rank and step
    (:func:`sim.metrics.rank_step_table`); (seconds, steps), None when no table has a step."""
    longest = [table.groupby("step")["step_time_s"].max() for table in per_rank if not table.empty]
    if not longest:
        return None
    pooled = pd.concat(longest, ignore_index=True)
    return float(pooled.median()), len(pooled)


def step_statistic(steps: int) -> str:
    """How the measured step time is taken, named: ``median of N steps``."""
    return f"median of {steps} step{'' if steps == 1 else 's'}"


def rank_pipeline_stage(manifest: dict[str, Any], ranks: list[int]) -> dict[int, int]:
    """rank -> pipeline rank, from the manifest's mesh (dims named "pp"); else each rank alone."""
    mesh = manifest.get("mesh") or {}
    names, shape = list(mesh.get("dim_names", [])), list(mesh.get("shape", []))
    if "pp" not in names or not shape:
        return {r: r for r in ranks}
    grid = np.asarray(mesh.get("ranks", np.arange(int(np.prod(shape))))).reshape(shape)
    pp_axis = names.index("pp")
    out = {}
    for index in np.ndindex(*shape):
        out[int(grid[index])] = int(index[pp_axis])
    return {r: out.get(r, r) for r in ranks}


def measured_timeline(run: ParsedRun) -> Timeline:
    """The run's Timeline with ``rank_pp`` and per-rank ``step_windows`` in its meta."""
    tl = run.timeline
    kept = run.steps[run.steps["kept"]]
    windows = tuple((int(r), int(s), float(a), float(b))
                    for r, s, a, b in zip(kept["rank"], kept["step"], kept["start_s"], kept["end_s"], strict=True))
    meta = replace(tl.meta, rank_pp=rank_pipeline_stage(run.manifest or {}, tl.ranks))
    if windows:
        meta = replace(meta, step_windows=windows)
    return tl.with_meta(meta)
