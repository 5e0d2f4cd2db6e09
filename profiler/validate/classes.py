"""Compute time per step by pass and op class, measured vs simulated (``trainsim validate --classes``).

Where a step-time error comes from: the GEMMs, the attention kernels or the rest of the compute
stream (element-wise work, copies, the host's time inside it) of the forward and backward passes.
Measured spans are classed by name (:func:`profiler.calibrate.op_class_fit.span_class`), simulated
ones by the op that drew them; both are the spans as they ran (contention included). Each figure is
the median over the (recording,) rank and step of the seconds spent per step, so the rows of one
pass need not add up to that pass's median total.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from core.taskgraph import TaskGraph
from core.vocab import Kind
from profiler.calibrate.op_class_fit import span_class
from profiler.validate.measured import MeasuredRun
from sim.timeline import Timeline

PASSES = {Kind.FWD: Kind.FWD, Kind.BWD: Kind.BWD, Kind.BWD_INPUT: Kind.BWD, Kind.BWD_WEIGHT: Kind.BWD}
CLASSES = ("gemm", "attention", "other")


def _named(cls: pd.Series) -> pd.Series:
    return cls.where(cls.isin(CLASSES[:2]), "other")


def _per_step(frame: pd.DataFrame) -> pd.Series:
    """Median over (recording, rank, step) of the seconds per (pass, class)."""
    per = frame.groupby(["recording", "rank", "step", "pass", "cls"], observed=True)["seconds"].sum()
    return per.unstack(["pass", "cls"], fill_value=0.0).median()


def _compute(spans: pd.DataFrame) -> pd.DataFrame:
    spans = spans[(spans["lane"].astype(str) == "compute") & spans["kind"].astype(str).isin(list(PASSES))]
    return spans.assign(seconds=spans["end_s"] - spans["start_s"], **{"pass": spans["kind"].astype(str).map(PASSES)})


def measured_classes(run: MeasuredRun) -> pd.Series:
    """(pass, class) -> measured seconds per step (every recording's steps and ranks)."""
    frames = []
    for index, recording in enumerate(run.recordings):
        spans = _compute(recording.timeline.spans)
        frames.append(spans.assign(recording=index, cls=_named(spans["name"].astype(str).map(span_class))))
    return _per_step(pd.concat(frames, ignore_index=True))


def simulated_classes(timeline: Timeline, graph: TaskGraph) -> pd.Series:
    """(pass, class) -> simulated seconds per step; a span's class is its op's (by op name)."""
    op_class = {op.name: op.op_class for task in graph.tasks for op in task.ops}
    spans = _compute(timeline.spans)
    return _per_step(spans.assign(recording=0, cls=_named(spans["name"].astype(str).map(op_class).fillna("other"))))


def class_rows(measured: pd.Series, simulated: pd.Series) -> list[dict[str, Any]]:
    """Table rows: pass, class, measured_s, simulated_s, error (simulated / measured - 1)."""
    rows = []
    for pass_ in (Kind.FWD, Kind.BWD):
        for cls in CLASSES:
            m, s = float(measured.get((pass_, cls), 0.0)), float(simulated.get((pass_, cls), 0.0))
            if m == 0.0 and s == 0.0:
                continue
            rows.append({"pass": pass_, "class": cls, "measured_s": round(m, 6), "simulated_s": round(s, 6),
                         "error": round(s / m - 1.0, 4) if m > 0 else None})
    return rows
