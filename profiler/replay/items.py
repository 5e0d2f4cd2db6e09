"""Replay items: the measured spans of a run, laid out on the streams they executed on.

An *item* is one piece of measured activity on one stream of one rank: a GPU kernel, memcpy or
NCCL kernel on a CUDA stream; a CPU op, collective call or gloo transfer on a CPU thread; a
CUDA runtime call or a piece of CPU op time on a CPU thread of a GPU run (see
:mod:`profiler.replay.cpu_side`); and zero-length step markers at each rank's ``ProfilerStep``
start and end on its main thread. Items that are Timeline spans keep their Timeline row, so the
replayed Timeline has the same rows as the measured one.

Columns (one row per item, times in seconds on the measured Timeline's clock):
    rank, stream (key of the stream, e.g. "gpu0:7", "cpu:59811", "p2p"), ordered (runs in its
    stream's program order), start_s, end_s, lane, kind, name, role (compute | comm | memcpy |
    call | host | marker), source (raw source, or "cpu_call" / "cpu_piece" / "step_start" /
    "step_end"), row (Timeline row, -1 if none), step, group (collective key), pg, pg_ranks,
    bytes, launch_s (CPU launch/call start, NaN), launch_tid, correlation, wait (a blocking call
    whose end waits for another item).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from core.vocab import Kind, Lane
from profiler.kineto.parsed import ParsedRun

GPU_SOURCES = ("kernel", "gpu_memcpy", "gpu_memset", "nccl_kernel")
TRANSFER_SOURCES = ("nccl_kernel", "gloo_work")
P2P_KINDS = (Kind.SEND, Kind.RECV)
P2P_STREAM = "p2p"
ITEM_COLUMNS = ("rank", "stream", "ordered", "start_s", "end_s", "lane", "kind", "name", "role",
                "source", "row", "step", "key", "group", "pg", "pg_ranks", "bytes", "launch_s",
                "launch_tid", "correlation", "wait")
WAIT_CALL_PREFIXES = ("_c10d_functional::wait_tensor", "c10d_functional::wait_tensor", "c10d::wait")


def _role(lane: np.ndarray, source: np.ndarray) -> np.ndarray:
    role = np.where(lane == Lane.COMPUTE, "compute", np.where(lane == Lane.MEMCPY, "memcpy", "comm"))
    role = np.where(source == "gloo_call", "call", role)
    return role.astype(object)


def _stream_keys(df: pd.DataFrame) -> np.ndarray:
    source = df["source"].to_numpy()
    gpu = np.isin(source, GPU_SOURCES)
    p2p = (source == "gloo_work") & np.isin(df["kind"].to_numpy(), P2P_KINDS)
    dev = df["device"].to_numpy()
    stream = df["stream"].to_numpy()
    keys = np.where(gpu, [f"gpu{d}:{s}" for d, s in zip(dev, stream, strict=True)],
                    [f"cpu:{s}" for s in stream])
    return np.where(p2p, P2P_STREAM, keys).astype(object)


def timeline_items(run: ParsedRun) -> pd.DataFrame:
    """Items for every span of the run's measured Timeline."""
    tl, raw = run.timeline.spans, run.raw
    df = pd.concat([tl.reset_index(drop=True), raw.reset_index(drop=True)], axis=1)
    lane = df["lane"].astype(str).to_numpy()
    source = df["source"].astype(str).to_numpy()
    names = df["name"].astype(str).to_numpy()
    stream = _stream_keys(df)
    wait = (source == "gloo_call") & np.fromiter((n.startswith(WAIT_CALL_PREFIXES) for n in names),
                                                 bool, names.size)
    return pd.DataFrame({
        "rank": df["rank"].to_numpy(np.int64), "stream": stream, "ordered": stream != P2P_STREAM,
        "start_s": df["start_s"].to_numpy(float), "end_s": df["end_s"].to_numpy(float),
        "lane": lane.astype(object), "kind": df["kind"].astype(str).to_numpy(object),
        "name": names.astype(object), "role": _role(lane, source), "source": source.astype(object),
        "row": np.arange(len(df), dtype=np.int64), "step": df["step"].to_numpy(np.int64),
        "key": df["group"].astype(str).to_numpy(object),
        "group": np.where(np.isin(source, TRANSFER_SOURCES), df["group"].astype(str), "").astype(object),
        "pg": df["pg"].astype(str).to_numpy(object), "pg_ranks": df["pg_ranks"].astype(str).to_numpy(object),
        "bytes": df["bytes"].to_numpy(float), "launch_s": df["launch_s"].to_numpy(float),
        "launch_tid": df["launch_tid"].to_numpy(np.int64),
        "correlation": df["correlation"].to_numpy(np.int64), "wait": wait,
    })


def cpu_main_threads(items: pd.DataFrame) -> dict[int, int]:
    """rank -> main thread id of a CPU (gloo) run: the thread with the most CPU op spans."""
    out: dict[int, int] = {}
    cpu = items[items["source"].isin(["cpu_op", "gloo_call"])]
    for rank, part in cpu.groupby("rank"):
        tid = Counter(part["stream"]).most_common(1)[0][0]
        out[int(rank)] = int(str(tid).split(":", 1)[1])
    return out


def marker_items(run: ParsedRun, main_tid: dict[int, int]) -> pd.DataFrame:
    """Zero-length items at each kept ProfilerStep's start and end on the rank's main thread."""
    steps = run.steps[run.steps["kept"] & run.steps["rank"].isin(list(main_tid))]
    rows = []
    for r, step, s, e in zip(steps["rank"], steps["step"], steps["start_s"], steps["end_s"], strict=True):
        for source, t in (("step_start", s), ("step_end", e)):
            rows.append(_extra(int(r), f"cpu:{main_tid[int(r)]}", float(t), float(t), "marker",
                               source, f"ProfilerStep {source[5:]}", int(step)))
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def _extra(rank: int, stream: str, start: float, end: float, role: str, source: str, name: str,
           step: int, wait: bool = False) -> dict[str, object]:
    """An item that is not a Timeline span."""
    return {"rank": rank, "stream": stream, "ordered": True, "start_s": start, "end_s": end,
            "lane": "host", "kind": "other", "name": name, "role": role, "source": source,
            "row": -1, "step": step, "key": "", "group": "", "pg": "", "pg_ranks": "", "bytes": 0.0,
            "launch_s": np.nan, "launch_tid": -1, "correlation": -1, "wait": wait}


def extra_items(rows: list[dict[str, object]]) -> pd.DataFrame:
    """A frame of extra items (host pieces, runtime calls) in the item columns."""
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def make_extra(rank: int, stream: str, start: float, end: float, role: str, source: str,
               name: str, step: int, *, wait: bool = False, correlation: int = -1) -> dict[str, object]:
    """One extra item row (see :func:`extra_items`)."""
    row = _extra(rank, stream, start, end, role, source, name, step, wait)
    row["correlation"] = correlation
    return row


def order_items(items: pd.DataFrame) -> pd.DataFrame:
    """Items sorted by (rank, stream, start, end); index reset.

    A step marker sorts before the spans that start at its time (a step end marker after the
    spans that end by then, as they start earlier), a step end before a step start.
    """
    source = items["source"].to_numpy()
    prio = np.where(source == "step_end", 0, np.where(source == "step_start", 1, 2))
    out = items.assign(_prio=prio)
    out = out.sort_values(["rank", "stream", "start_s", "_prio", "end_s"], kind="stable")
    return out.drop(columns=["_prio"]).reset_index(drop=True)
