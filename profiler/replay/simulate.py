"""Run a replay model on the simulator's SimPy engine and turn the result into a Timeline."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from core.timeline_meta import Source
from profiler.replay.graph import Params, Realized, item_times, realize
from profiler.replay.model import ReplayModel
from sim.costing import cost_fixed
from sim.engine import Engine
from sim.timeline import Timeline


class ReplayDeadlock(ValueError):
    """The replay graph cannot run to the end (inconsistent matching); one-line message."""


@dataclass
class ReplayRun:
    """One replay: the graph, engine times per task, per-item times and the replayed Timeline
    (its row i is row i of the measured Timeline, with replayed times).

    ``windows`` has one row per (rank, step): rank, step, start_s, end_s, step_time_s (the
    replayed ProfilerStep window on the rank's main thread).
    """

    params: Params
    realized: Realized
    task_start_s: np.ndarray
    task_end_s: np.ndarray
    reach_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    timeline: Timeline
    windows: pd.DataFrame


def base_params(model: ReplayModel) -> Params:
    """The parameters of the unchanged replay."""
    return Params(host_s=model.host_s.copy(), lag_s=model.lag_s.copy(), dur_s=model.dur_s.copy(),
                  barrier=model.barrier.copy(), post_s=np.zeros(len(model)), pre_s=model.pre_s.copy())


def _engine_times(real: Realized) -> tuple[np.ndarray, np.ndarray]:
    engine = Engine(real.graph, cost_fixed(real.graph))
    try:
        result = engine.run(detail="task")
    except RuntimeError as exc:
        if "deadlock" not in str(exc):
            raise
        raise ReplayDeadlock(f"replay cannot complete ({exc}); the collectives' matching is inconsistent "
                             "with the order of the trace") from None
    return np.asarray(result.start_s, float), np.asarray(result.end_s, float)


def _windows(model: ReplayModel, start: np.ndarray) -> pd.DataFrame:
    items = model.items
    rows = []
    for (rank, step), part in items[items["role"] == "marker"].groupby(["rank", "step"]):
        a = part.index[part["source"] == "step_start"]
        b = part.index[part["source"] == "step_end"]
        if len(a) and len(b):
            lo, hi = float(start[a[0]]), float(start[b[0]])
            rows.append({"rank": int(rank), "step": int(step), "start_s": lo + model.origin_s,
                         "end_s": hi + model.origin_s, "step_time_s": hi - lo})
    return pd.DataFrame(rows, columns=["rank", "step", "start_s", "end_s", "step_time_s"])


def _timeline(model: ReplayModel, shown: np.ndarray, fin: np.ndarray, windows: pd.DataFrame) -> Timeline:
    measured: Timeline = model.measured["timeline"]
    spans = measured.spans.copy()
    rows = model.items["row"].to_numpy()
    has = rows >= 0
    starts, ends = spans["start_s"].to_numpy(copy=True), spans["end_s"].to_numpy(copy=True)
    starts[rows[has]] = shown[has] + model.origin_s
    ends[rows[has]] = fin[has] + model.origin_s
    spans["start_s"], spans["end_s"] = starts, ends  # rows stay in the measured Timeline's order
    meta = replace(measured.meta, source=Source.REPLAYED,
                   step_windows=tuple((int(r), int(s), float(a), float(b)) for r, s, a, b in
                                      zip(windows["rank"], windows["step"], windows["start_s"], windows["end_s"],
                                          strict=True)))
    return Timeline(spans, meta)


def run_replay(model: ReplayModel, params: Params | None = None) -> ReplayRun:
    """Replay ``model`` (unchanged when ``params`` is None) on the SimPy engine."""
    params = params or base_params(model)
    real = realize(model, params)
    start, end = _engine_times(real)
    reach, shown, fin = item_times(model, real, params, start, end)
    windows = _windows(model, start[real.main_task])
    return ReplayRun(params=params, realized=real, task_start_s=start, task_end_s=end, reach_s=reach,
                     start_s=shown, end_s=fin, timeline=_timeline(model, shown, fin, windows), windows=windows)
