"""The Timeline: one columnar table of spans, written by the simulator and by the trace parser.

Every metric, report and comparison reads only a Timeline, so "simulated vs measured" is a
function of two Timelines. Columns (units in seconds and bytes):

    rank, lane, kind, name, start_s, end_s, step, stage, chunk, microbatch, layer, bytes, flops, group

``lane`` is one of compute, comm.tp, comm.pp, comm.dp, comm.cp, memcpy, host (a parser may add
other lanes such as "comm" for communication it cannot attribute); ``kind`` one of fwd, bwd,
bwd_input, bwd_weight, optimizer, all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
send, recv, offload, other. Integer labels are -1 when unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.timeline_meta import TimelineMeta

COLUMNS = ("rank", "lane", "kind", "name", "start_s", "end_s", "step", "stage", "chunk",
           "microbatch", "layer", "bytes", "flops", "group")
INT_COLUMNS = ("rank", "step", "stage", "chunk", "microbatch", "layer")
FLOAT_COLUMNS = ("start_s", "end_s", "bytes", "flops")
CATEGORY_COLUMNS = ("lane", "kind")
STRING_COLUMNS = ("name", "group")
COMM_LANE_PREFIX = "comm"
COMPUTE_LANE = "compute"


@dataclass
class Timeline:
    """A table of spans (a pandas DataFrame with the fixed columns) plus its ``meta``
    (:class:`core.timeline_meta.TimelineMeta`): where the data came from, the world size,
    folding, pipeline stages, model FLOPs per step, a measured run's steps and warnings."""

    spans: pd.DataFrame
    meta: TimelineMeta = field(default_factory=TimelineMeta)

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.spans.columns]
        if missing:
            raise ValueError(f"Timeline is missing columns: {', '.join(missing)}")

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def ranks(self) -> list[int]:
        """Ranks present, sorted."""
        return sorted(int(r) for r in self.spans["rank"].unique())

    @property
    def steps(self) -> list[int]:
        """Step labels present (>= 0), sorted."""
        return sorted(int(s) for s in self.spans["step"].unique() if s >= 0)

    def select(self, mask: Any) -> Timeline:
        """A new Timeline with the rows where ``mask`` holds (same meta)."""
        return Timeline(self.spans.loc[mask].reset_index(drop=True), self.meta)

    def shifted(self, offset_s: float) -> Timeline:
        """A copy with every span moved by ``offset_s`` seconds."""
        df = self.spans.copy()
        df["start_s"] += offset_s
        df["end_s"] += offset_s
        return Timeline(df, self.meta)


class TimelineBuilder:
    """Collects spans row by row (cheap appends to lists) and builds a Timeline once."""

    def __init__(self) -> None:
        self._cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}

    def add(self, *, rank: int, lane: str, kind: str, name: str, start_s: float, end_s: float,
            step: int = 0, stage: int = -1, chunk: int = -1, microbatch: int = -1, layer: int = -1,
            bytes: float = 0.0, flops: float = 0.0, group: str = "") -> None:
        """Append one span."""
        c = self._cols
        c["rank"].append(rank)
        c["lane"].append(lane)
        c["kind"].append(kind)
        c["name"].append(name)
        c["start_s"].append(start_s)
        c["end_s"].append(end_s)
        c["step"].append(step)
        c["stage"].append(stage)
        c["chunk"].append(chunk)
        c["microbatch"].append(microbatch)
        c["layer"].append(layer)
        c["bytes"].append(bytes)
        c["flops"].append(flops)
        c["group"].append(group)

    def __len__(self) -> int:
        return len(self._cols["rank"])

    def build(self, meta: TimelineMeta | None = None) -> Timeline:
        """The Timeline of all spans added so far, sorted by (rank, start, lane)."""
        return timeline_from_columns(self._cols, meta)


def timeline_from_columns(cols: dict[str, Any], meta: TimelineMeta | None = None) -> Timeline:
    """Build a Timeline from column arrays/lists, coercing dtypes and sorting rows."""
    data: dict[str, Any] = {}
    for c in INT_COLUMNS:
        data[c] = np.asarray(cols[c], dtype=np.int64)
    for c in FLOAT_COLUMNS:
        data[c] = np.asarray(cols[c], dtype=np.float64)
    for c in CATEGORY_COLUMNS:
        data[c] = pd.Categorical(cols[c])
    for c in STRING_COLUMNS:
        data[c] = np.asarray(cols[c], dtype=object)
    df = pd.DataFrame({c: data[c] for c in COLUMNS})
    df = df.sort_values(["rank", "start_s", "end_s", "lane"], kind="stable").reset_index(drop=True)
    return Timeline(df, meta or TimelineMeta())


def empty_timeline(meta: TimelineMeta | None = None) -> Timeline:
    """A Timeline with no spans."""
    return TimelineBuilder().build(meta)
