"""Where FSDP2 waits for its collectives on a CPU (gloo) run, from its profiler ranges.

``work.wait()`` leaves no trace of its own, but FSDP2 names the steps around it (torch 2.x):
``FSDP::all_gather (<unit>)`` issues a unit's all-gather and ``FSDP::all_gather_copy_out
(<unit>)`` starts right after waiting for it; ``FSDP::post_backward_reduce (<unit>)`` issues the
reduce-scatter and ``FSDP::post_backward_rs_wait (<unit>)`` waits for it. So the op running at a
copy-out / rs-wait range's start waits for the transfer issued in the latest matching issue
range of the same unit — also when the transfer was done early (a prefetch), which timing alone
cannot tell. An issue range that lasts until its transfer ends was synchronous (FSDP2's default
on CPU): the op running when the call returned waited for it right there. The wait happens right before the copy-out / rs-wait range starts, often inside a larger op
(an autograd node running FSDP's hook): that op becomes a wait item whose work before the wait
point is ``pre`` time (see :mod:`profiler.replay.model`). Ranges come from the trace files (the
Timeline keeps only ops and collectives).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profiler.kineto.columns import USER_ANNOTATION
from profiler.kineto.parse_file import read_columns
from profiler.kineto.parsed import ParsedRun

_RANGE_RE = re.compile(r"^FSDP::(all_gather_copy_out|all_gather|post_backward_rs_wait|post_backward_reduce)"
                       r"(?: \((.*)\))?$")
WAIT_OF = {"all_gather_copy_out": "all_gather", "post_backward_rs_wait": "post_backward_reduce"}

Edge = tuple[int, int, str]
WaitPoint = tuple[int, int, float]  # (item that waits, transfer, wait time)


def _ranges(run: ParsedRun, rank: int) -> pd.DataFrame:
    """FSDP issue/wait ranges of one rank: step (what), unit, tid, start_s, end_s."""
    tc = read_columns(run.files[rank])
    off = float(run.timeline.meta.t0_unix_us or 0.0) - tc.base_ns / 1000.0
    rows = []
    for code, name in enumerate(tc.names):
        m = _RANGE_RE.match(name)
        if not m:
            continue
        for i in np.flatnonzero((tc.cat == USER_ANNOTATION) & (tc.name == code)):
            rows.append({"what": m.group(1), "unit": m.group(2) or "", "tid": int(tc.tid[i]),
                         "start_s": (tc.ts[i] - off) * 1e-6, "end_s": (tc.ts[i] + tc.dur[i] - off) * 1e-6})
    return pd.DataFrame(rows, columns=["what", "unit", "tid", "start_s", "end_s"])


def _transfer_in(items: pd.DataFrame, rank: int, tid: int, lo: float, hi: float) -> tuple[int, float]:
    """(transfer, end of its call) for the call on thread ``tid`` that started inside [lo, hi];
    (-1, nan) if none."""
    calls = items[(items["rank"] == rank) & (items["stream"] == f"cpu:{tid}") & (items["source"] == "gloo_call")
                  & (items["start_s"] >= lo) & (items["start_s"] <= hi)]
    for key, call_end in zip(calls["key"], calls["end_s"], strict=True):
        work = items.index[(items["rank"] == rank) & (items["source"] == "gloo_work") & (items["key"] == key)]
        if len(work):
            return int(work[0]), float(call_end)
    return -1, float("nan")


def _waiting_item(items: pd.DataFrame, rank: int, tid: int, at: float) -> int:
    """The item of thread ``tid`` running at time ``at``, else the next one, -1 if none."""
    part = items[(items["rank"] == rank) & (items["stream"] == f"cpu:{tid}") & (items["end_s"] > at)]
    return int(part["start_s"].idxmin()) if len(part) else -1


def _synchronous_waits(items: pd.DataFrame, rank: int, ranges: pd.DataFrame) -> list[WaitPoint]:
    """Issue ranges that end with their transfer: the collective was waited for right after its
    call (FSDP2 unshards synchronously unless asked otherwise), inside the issue range."""
    out: list[WaitPoint] = []
    for issue in ranges[ranges["what"].isin(list(WAIT_OF.values()))].itertuples():
        x, call_end = _transfer_in(items, rank, int(issue.tid), float(issue.start_s), float(issue.end_s))
        if x >= 0 and items.at[x, "end_s"] <= float(issue.end_s) + 1e-6:
            waiter = _waiting_item(items, rank, int(issue.tid), call_end)
            if waiter >= 0 and waiter != x:
                out.append((waiter, x, call_end))
    return out


def fsdp_wait_points(run: ParsedRun, items: pd.DataFrame, origin_s: float = 0.0) -> list[WaitPoint]:
    """(item that waits, transfer, wait time) for every FSDP2 wait range of the run.

    ``items`` are in replay time (measured time minus ``origin_s``)."""
    out: list[WaitPoint] = []
    for rank in sorted(run.files):
        ranges = _ranges(run, rank)
        if ranges.empty:
            continue
        ranges = ranges.assign(start_s=ranges["start_s"] - origin_s, end_s=ranges["end_s"] - origin_s)
        out.extend(_synchronous_waits(items, rank, ranges))
        for wait in ranges[ranges["what"].isin(list(WAIT_OF))].itertuples():
            issues = ranges[(ranges["what"] == WAIT_OF[wait.what]) & (ranges["unit"] == wait.unit)
                            & (ranges["start_s"] <= wait.start_s)]
            if issues.empty:
                continue
            issue = issues.loc[issues["start_s"].idxmax()]
            x, _ = _transfer_in(items, rank, int(issue["tid"]), float(issue["start_s"]), float(issue["end_s"]))
            waiter = _waiting_item(items, rank, int(wait.tid), float(wait.start_s))
            if x >= 0 and waiter >= 0 and waiter != x:
                out.append((waiter, x, float(wait.start_s)))
    return out
