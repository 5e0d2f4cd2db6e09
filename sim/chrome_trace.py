"""Export a Timeline as a Chrome/Perfetto trace (JSON "traceEvents", times in microseconds)."""

from __future__ import annotations

from pathlib import Path

import orjson

from core.vocab import Lane
from sim.atomic import write_bytes_atomic
from sim.timeline import Timeline

LANE_ORDER = (Lane.COMPUTE, Lane.TP, Lane.CP, Lane.PP, Lane.DP, Lane.COMM, Lane.MEMCPY, Lane.HOST)


def chrome_trace_events(tl: Timeline) -> list[dict[str, object]]:
    """Trace events: one complete ("X") event per span; process = rank, thread = lane."""
    df = tl.spans
    lanes = sorted(df["lane"].astype(str).unique(), key=lambda x: (LANE_ORDER.index(x) if x in LANE_ORDER else 99, x))
    tid = {lane: i for i, lane in enumerate(lanes)}
    events: list[dict[str, object]] = []
    for rank in tl.ranks:
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        for lane, i in tid.items():
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": i, "args": {"name": lane}})
    cols = [df[c].to_numpy() for c in ("rank", "lane", "kind", "name", "start_s", "end_s", "step", "stage",
                                        "chunk", "microbatch", "layer", "bytes", "flops")]
    for rank, lane, kind, name, s, e, step, stage, chunk, mb, layer, nbytes, flops in zip(*cols, strict=True):
        args = {"kind": str(kind), "step": int(step), "stage": int(stage), "chunk": int(chunk),
                "microbatch": int(mb), "layer": int(layer)}
        if nbytes:
            args["bytes"] = float(nbytes)
        if flops:
            args["flops"] = float(flops)
        events.append({"ph": "X", "name": str(name), "cat": str(kind), "pid": int(rank), "tid": tid[str(lane)],
                       "ts": round(float(s) * 1e6, 3), "dur": round(float(e - s) * 1e6, 3), "args": args})
    return events


def write_chrome_trace(tl: Timeline, path: str | Path) -> Path:
    """Write the trace JSON atomically; open it in ui.perfetto.dev or chrome://tracing."""
    doc = {"traceEvents": chrome_trace_events(tl), "displayTimeUnit": "ms",
           "otherData": {"source": str(tl.meta.source or ""), "generator": "trainsim"}}
    return write_bytes_atomic(path, orjson.dumps(doc))
