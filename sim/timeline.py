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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from core.arrays import sorted_unique
from core.timeline_meta import TimelineMeta
from sim.span_arrays import Labels, frame_labels

if TYPE_CHECKING:  # pandas is imported by the features that read the frame (reports, traces, replay)
    import pandas as pd

COLUMNS = ("rank", "lane", "kind", "name", "start_s", "end_s", "step", "stage", "chunk",
           "microbatch", "layer", "bytes", "flops", "group")
INT_COLUMNS = ("rank", "step", "stage", "chunk", "microbatch", "layer")
FLOAT_COLUMNS = ("start_s", "end_s", "bytes", "flops")
CATEGORY_COLUMNS = ("lane", "kind")
STRING_COLUMNS = ("name", "group")
COMM_LANE_PREFIX = "comm"
COMPUTE_LANE = "compute"


class Timeline:
    """A table of spans with the fixed columns plus its ``meta``
    (:class:`core.timeline_meta.TimelineMeta`): where the data came from, the world size,
    folding, pipeline stages, model FLOPs per step, a measured run's steps and warnings.

    Made from a pandas DataFrame (``spans``) or from numpy ``columns`` (the simulator's: numbers
    as arrays, ``lane``/``kind``/``name``/``group`` as :class:`Labels`, or a function of no
    arguments making one, called the first time the column is read: columns that metrics and
    memory do not read are made only for the features that do); the DataFrame of the latter is
    built, importing pandas, the first time ``spans`` is read. :meth:`column` and
    :meth:`labels` read either without building it."""

    def __init__(self, spans: pd.DataFrame | None = None, meta: TimelineMeta | None = None, *,
                 columns: dict[str, Any] | None = None) -> None:
        if (spans is None) == (columns is None):
            raise TypeError("Timeline: give either spans (a DataFrame) or columns")
        names = list(spans.columns) if spans is not None else list(columns or {})
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise ValueError(f"Timeline is missing columns: {', '.join(missing)}")
        self._frame = spans
        self._columns = columns
        self.meta = meta or TimelineMeta()

    @property
    def spans(self) -> pd.DataFrame:
        """The spans as a pandas DataFrame (built on first use from numpy columns)."""
        if self._frame is None:
            self._frame = _frame({c: self._made(c) for c in self._columns or {}})
        return self._frame

    def _made(self, name: str) -> Any:
        """Column ``name`` of ``columns``, made now if it was given as a function."""
        assert self._columns is not None
        value = self._columns[name]
        if callable(value):
            value = self._columns[name] = value()
        return value

    def column(self, name: str) -> np.ndarray:
        """A numeric column as a numpy array (read-only: a view of the Timeline's data)."""
        if self._frame is None and self._columns is not None:
            return np.asarray(self._made(name))
        return self.spans[name].to_numpy()

    def labels(self, name: str) -> Labels:
        """A label column (``lane``, ``kind``, ``name``, ``group``) as codes and categories."""
        if self._frame is None and self._columns is not None:
            value = self._made(name)
            if isinstance(value, Labels):
                return value
        return frame_labels(self.spans[name])

    def label_mask(self, name: str, keep: Callable[[str], bool]) -> np.ndarray:
        """Rows whose label in column ``name`` satisfies ``keep`` (called once per distinct label)."""
        return self.labels(name).mask(keep)

    def with_meta(self, meta: TimelineMeta) -> Timeline:
        """The same spans with another ``meta``."""
        if self._frame is None:
            return Timeline(meta=meta, columns=self._columns)
        return Timeline(self._frame, meta)

    def __len__(self) -> int:
        return int(self.column("rank").size)

    @property
    def ranks(self) -> list[int]:
        """Ranks present, sorted."""
        return sorted_unique(self.column("rank")).tolist()

    @property
    def span_s(self) -> float:
        """Seconds from the first span's start to the last span's end (0 without spans)."""
        if len(self) == 0:
            return 0.0
        return float(np.nanmax(self.column("end_s").astype(float, copy=False))
                     - np.nanmin(self.column("start_s").astype(float, copy=False)))

    @property
    def steps(self) -> list[int]:
        """Step labels present (>= 0), sorted."""
        return [s for s in sorted_unique(self.column("step")).tolist() if s >= 0]

    def select(self, mask: Any) -> Timeline:
        """A new Timeline with the rows where ``mask`` holds (same meta)."""
        return Timeline(self.spans.loc[mask].reset_index(drop=True), self.meta)

    def shifted(self, offset_s: float) -> Timeline:
        """A copy with every span moved by ``offset_s`` seconds."""
        df = self.spans.copy()
        df["start_s"] += offset_s
        df["end_s"] += offset_s
        return Timeline(df, self.meta)


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    """The DataFrame of numpy ``columns`` (:class:`Labels` become pandas categoricals)."""
    import pandas as pd

    data = {c: pd.Categorical.from_codes(v.codes, categories=v.categories) if isinstance(v, Labels) else v
            for c, v in columns.items()}
    return pd.DataFrame(data, columns=list(COLUMNS), copy=False)


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
    import pandas as pd

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
