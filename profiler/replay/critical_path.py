"""The critical path of a replayed step: the chain of tasks that sets its length.

Walk back from the end of the slowest rank's step: every task of the replay graph starts when
the last of its constraints is met (its stream predecessor, a dependency, or — for a collective
or p2p rendezvous — the last member's arrival), so the constraint that ended exactly at its
start is the one that held it back. Following those constraints to the step's start gives a
gap-free chain whose durations add up to the step time. Each piece is one of:

- compute: kernels / CPU ops (and memcpy, counted separately as ``memcpy``);
- communication: transfers after all members arrived;
- host: time on a stream between items that the trace does not explain (Python, launch
  overhead, idle CPU time), CPU-side calls and op pieces of GPU runs;
- waiting: reaction lags after a dependency (wake-up, launch latency) and blocking calls after
  what they waited for was done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler.replay.model import ReplayModel
from profiler.replay.simulate import ReplayRun
from sim.summary import round_sig

CATEGORIES = ("compute", "memcpy", "communication", "host", "waiting")
EPS_S = 1e-9


@dataclass(frozen=True)
class CriticalPath:
    """The path of one (rank, step) window: its pieces (clipped to the window) and shares."""

    rank: int
    step: int
    step_time_s: float
    segments: pd.DataFrame  # rank, lane, kind, name, start_s, end_s, category, item
    shares: dict[str, float]

    def summary(self, top: int = 10) -> dict[str, Any]:
        """JSON object: where the path is, its shares, and its longest pieces."""
        seg = self.segments.assign(dur_s=self.segments["end_s"] - self.segments["start_s"])
        by_rank = seg.groupby(["rank", "category"])["dur_s"].sum().reset_index()
        longest = seg.sort_values("dur_s", ascending=False, kind="stable").head(top)
        return {
            "rank": self.rank, "step": self.step, "step_time_s": round_sig(self.step_time_s),
            "shares": {k: round_sig(v) for k, v in self.shares.items()},
            "seconds": {k: round_sig(v * self.step_time_s) for k, v in self.shares.items()},
            "segments": len(seg), "ranks_on_path": sorted(int(r) for r in seg["rank"].unique()),
            "by_rank": [{"rank": int(r), "category": str(c), "seconds": round_sig(float(d))}
                        for r, c, d in by_rank.itertuples(index=False)],
            "longest": [{"rank": int(r.rank), "lane": str(r.lane), "category": str(r.category), "name": str(r.name),
                         "start_s": round_sig(float(r.start_s)), "seconds": round_sig(float(r.dur_s))}
                        for r in longest.itertuples()],
        }


def _task_owner(model: ReplayModel, out: ReplayRun) -> tuple[np.ndarray, np.ndarray]:
    """Per task: its item and part (0 host, 1 lag, 2 entry, 3 main, 4 added latency)."""
    n = len(out.realized.graph.tasks)
    item, part = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    real = out.realized
    for k, ids in enumerate((real.host_task, real.lag_task, real.entry_task, real.main_task, real.post_task)):
        has = ids >= 0
        item[ids[has]] = np.flatnonzero(has)
        part[ids[has]] = k
    return item, part


def _category(model: ReplayModel, item: int, part: int) -> str:
    if part == 0:
        return "host"
    if part == 1:
        return "waiting"
    if part == 4:
        return "communication"
    kind, role = model.kind[item], model.items["role"].iat[item]
    if kind in ("collective", "p2p"):
        return "communication"
    if kind == "wait" and role != "compute":
        return "waiting"
    return {"compute": "compute", "memcpy": "memcpy", "comm": "communication"}.get(str(role), "host")


def _predecessors(out: ReplayRun) -> np.ndarray:
    """Stream predecessor task of each ordered task, -1 if none."""
    graph = out.realized.graph
    prev = np.full(len(graph.tasks), -1, dtype=np.int64)
    for ids in graph.streams().values():
        ordered = [i for i in ids if graph.tasks[i].ordered]
        for a, b in zip(ordered, ordered[1:], strict=False):
            prev[b] = a
    return prev


def _constraints(out: ReplayRun, prev: np.ndarray, members: dict[str, list[int]], task: int) -> list[int]:
    graph = out.realized.graph
    group = graph.tasks[task].group
    tasks = members[group] if group else [task]
    cands: list[int] = []
    for t in tasks:
        cands.extend(graph.deps[t])
        if prev[t] >= 0:
            cands.append(int(prev[t]))
    return cands


def go_times(out: ReplayRun) -> np.ndarray:
    """When each task began its own work: its end minus its (fixed) duration. For a rendezvous
    that is when the last member arrived, whatever start the engine records for early members."""
    durations = np.fromiter((sum(op.duration_s or 0.0 for op in t.ops) for t in out.realized.graph.tasks),
                            float, len(out.realized.graph.tasks))
    return out.task_end_s - durations


def _walk(out: ReplayRun, end_task: int, window_start: float) -> list[int]:
    graph = out.realized.graph
    members: dict[str, list[int]] = {}
    for i, t in enumerate(graph.tasks):
        if t.group:
            members.setdefault(t.group, []).append(i)
    prev = _predecessors(out)
    start, end = go_times(out), out.task_end_s
    path, cur = [end_task], end_task
    while start[cur] > window_start + EPS_S:
        cands = _constraints(out, prev, members, cur)
        if not cands:
            break
        cur = max(cands, key=lambda c: (end[c], c))
        path.append(cur)
    return path[::-1]


def critical_path(model: ReplayModel, out: ReplayRun, rank: int | None = None, step: int | None = None) -> CriticalPath:
    """The critical path of the (rank, step) window (default: the longest one)."""
    w = out.windows
    if rank is not None:
        w = w[w["rank"] == rank]
    if step is not None:
        w = w[w["step"] == step]
    if w.empty:
        raise ValueError(f"no replayed step window for rank={rank} step={step}")
    row = w.loc[w["step_time_s"].idxmax()]
    r, s = int(row["rank"]), int(row["step"])
    items = model.items
    marker = items.index[(items["rank"] == r) & (items["step"] == s) & (items["source"] == "step_end")][0]
    lo, hi = float(row["start_s"]) - model.origin_s, float(row["end_s"]) - model.origin_s
    path = _walk(out, int(out.realized.main_task[marker]), lo)
    owner, part = _task_owner(model, out)
    seg = _segments(model, out, path, owner, part, lo, hi)
    total = hi - lo
    shares = {c: float((seg.loc[seg["category"] == c, "end_s"] - seg.loc[seg["category"] == c, "start_s"]).sum()) / total
              if total > 0 else 0.0 for c in CATEGORIES}
    return CriticalPath(rank=r, step=s, step_time_s=total, segments=seg, shares=shares)


def _segments(model: ReplayModel, out: ReplayRun, path: list[int], owner: np.ndarray, part: np.ndarray,
              lo: float, hi: float) -> pd.DataFrame:
    go = go_times(out)
    rows = []
    for t in path:
        i, k = int(owner[t]), int(part[t])
        pieces = [(go[t], out.task_end_s[t], k)]
        pre = float(out.params.pre_s[i]) if k == 0 else 0.0
        if pre > 0:  # a wait item's host delay task also holds its work before the wait point
            pieces = [(go[t], out.task_end_s[t] - pre, 0), (out.task_end_s[t] - pre, out.task_end_s[t], 3)]
        for a, b, kk in pieces:
            a, b = max(a, lo), min(b, hi)
            if b > a:
                rows.append(_row(model, i, kk, a, b))
    return pd.DataFrame(rows, columns=["rank", "lane", "kind", "name", "start_s", "end_s", "category", "item"])


def _delay_name(model: ReplayModel, i: int, k: int) -> str:
    if k == 1:
        return "lag"
    if model.pred[i] < 0 and model.items["ordered"].iat[i]:
        return "start offset (before the stream's first traced event)"
    return "host delay"


def _row(model: ReplayModel, i: int, k: int, a: float, b: float) -> dict[str, Any]:
    items = model.items
    return {"rank": int(items["rank"].iat[i]), "lane": "host" if k < 2 else str(items["lane"].iat[i]),
            "kind": str(items["kind"].iat[i]) if k >= 2 else "other",
            "name": str(items["name"].iat[i]) if k >= 2 else _delay_name(model, i, k),
            "start_s": a + model.origin_s, "end_s": b + model.origin_s, "category": _category(model, i, k), "item": i}
