"""Per-rank figures of a measured run, following Holistic Trace Analysis (HTA) definitions.

HTA's temporal breakdown (``BreakdownAnalysis.get_temporal_breakdown``) and
computation/communication overlap (``CommunicationAnalysis.get_comm_comp_overlap``), restated on
a Timeline (device events only: GPU kernels/memcpy/memset, or on a CPU rank its compute ops and
gloo collectives):

    span_s                = end of the last device event - start of the first (kept steps)
    idle                  = span - |union(all device events)|
    compute               = |union(compute-lane events)|
    non_compute           = |union(all)| - compute            (communication + memory)
    comm_s                = |union(comm.* lanes)|
    comm_overlap_fraction = |union(comm) ∩ union(compute)| / comm_s   (HTA: "relative to comm")

Fractions are of ``span_s``. ``step_time_s`` is the mean over kept steps of the ProfilerStep#N
CPU range's duration on the rank's main thread (NaN when the run has no profiler steps).

Departure from HTA 0.5: on ns-resolution traces (float ts) HTA rounds every event inward to
whole µs (start up, end down; pytorch PR 122425); we keep the trace's precision. On µs traces
the figures are identical (tests/profiler/test_hta_external.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.kineto.parsed import ParsedRun
from sim.intervals import intersection_length, total_length, union
from sim.timeline import COMM_LANE_PREFIX, COMPUTE_LANE

BREAKDOWN_COLUMNS = ("rank", "step_time_s", "span_s", "compute_fraction", "non_compute_fraction",
                     "idle_fraction", "comm_s", "comm_overlap_fraction")


def rank_breakdown(spans: pd.DataFrame) -> dict[str, float]:
    """HTA temporal breakdown + overlap of one rank's spans (seconds / fractions)."""
    s = spans["start_s"].to_numpy(dtype=np.float64)
    e = spans["end_s"].to_numpy(dtype=np.float64)
    lane = spans["lane"].astype(str).to_numpy()
    if s.size == 0:
        return {"span_s": 0.0, "compute_fraction": np.nan, "non_compute_fraction": np.nan,
                "idle_fraction": np.nan, "comm_s": 0.0, "comm_overlap_fraction": np.nan}
    span = float(e.max() - s.min())
    busy = total_length(s, e)
    is_comp = lane == COMPUTE_LANE
    is_comm = np.char.startswith(lane.astype(str), COMM_LANE_PREFIX)
    comp = union(s[is_comp], e[is_comp])
    comm = union(s[is_comm], e[is_comm])
    compute = float(np.sum(comp[1] - comp[0]))
    comm_s = float(np.sum(comm[1] - comm[0]))
    overlap = intersection_length(comm, comp)
    frac = (lambda x: x / span) if span > 0 else (lambda x: np.nan)
    return {"span_s": span, "compute_fraction": frac(compute),
            "non_compute_fraction": frac(busy - compute), "idle_fraction": frac(span - busy),
            "comm_s": comm_s, "comm_overlap_fraction": overlap / comm_s if comm_s > 0 else np.nan}


def per_rank_breakdown(parsed: ParsedRun) -> pd.DataFrame:
    """One row per rank with the columns of ``BREAKDOWN_COLUMNS`` (definitions in the module doc)."""
    spans = parsed.timeline.spans
    steps = parsed.steps.loc[parsed.steps["kept"].astype(bool)]
    step_time = steps.groupby("rank")["dur_s"].mean()
    rows = []
    for rank in parsed.timeline.meta.ranks or parsed.timeline.ranks:
        row = {"rank": int(rank), "step_time_s": float(step_time.get(rank, np.nan))}
        row.update(rank_breakdown(spans[spans["rank"] == rank]))
        rows.append(row)
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS))
