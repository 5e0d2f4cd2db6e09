"""Profiler steps of one rank: the main thread, its ``ProfilerStep#N`` ranges, step lookup.

``ProfilerStep#N`` is a CPU user_annotation on the main thread; N is torch.profiler's global step
counter. CPU events belong to the step whose range contains their start (as HTA assigns them);
GPU work belongs to the step of the CPU call that launched it (found through correlation), so
a kernel that finishes after its step's CPU range still counts for that step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profiler.annotations import parse_step
from profiler.kineto.columns import CPU_OP, CUDA_DRIVER, CUDA_RUNTIME, USER_ANNOTATION, TraceColumns
from profiler.kineto.malformed import INT64_MAX, Skip, note
from sim.intervals import enclosing_index

_PROFILER_STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")


@dataclass(frozen=True)
class RankSteps:
    """The ProfilerStep ranges of one rank, sorted by start (times in file µs).

    ``trainsim_step[i]`` is the ``trainsim:step K`` range inside profiler step i (-1 if none).
    """

    main_tid: int
    main_pid: int
    number: npt.NDArray[np.int64]
    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    trainsim_step: npt.NDArray[np.int64]

    def step_of(self, points: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """ProfilerStep number containing each time (µs), -1 outside every step."""
        idx = enclosing_index(points, self.start, self.end)
        out = np.full(idx.shape, -1, dtype=np.int64)
        out[idx >= 0] = self.number[idx[idx >= 0]]
        return out


def _cpu_mask(tc: TraceColumns) -> npt.NDArray[np.bool_]:
    return np.isin(tc.cat, (CPU_OP, USER_ANNOTATION, CUDA_RUNTIME, CUDA_DRIVER))


def find_main_thread(tc: TraceColumns, step_rows: npt.NDArray[np.int64]) -> tuple[int, int]:
    """(pid, tid) of the main thread: owner of ProfilerStep ranges, else pid == tid, else busiest."""
    if step_rows.size:
        pairs = np.stack([tc.pid[step_rows], tc.tid[step_rows]], axis=1)
        uniq, counts = np.unique(pairs, axis=0, return_counts=True)
        pid, tid = uniq[int(np.argmax(counts))]
        return int(pid), int(tid)
    cpu = np.flatnonzero(_cpu_mask(tc) & (tc.pid >= 0))
    if cpu.size == 0:
        return -1, -1
    same = cpu[tc.pid[cpu] == tc.tid[cpu]]
    rows = same if same.size else cpu
    pairs = np.stack([tc.pid[rows], tc.tid[rows]], axis=1)
    uniq, counts = np.unique(pairs, axis=0, return_counts=True)
    pid, tid = uniq[int(np.argmax(counts))]
    return int(pid), int(tid)


def _named_rows(tc: TraceColumns, parse: object) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Rows of user annotations whose name parses, and the parsed integers."""
    codes = {}
    for code, name in enumerate(tc.names):
        value = parse(name)  # type: ignore[operator]
        if value is not None:
            if not fits_int64(value):
                note(tc.malformed, Skip.NUMBER_TOO_LARGE, -1, name, int(np.count_nonzero(tc.name == code)))
                continue
            codes[code] = int(value)
    if not codes:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.fromiter(codes.keys(), np.int64)
    rows = np.flatnonzero((tc.cat == USER_ANNOTATION) & np.isin(tc.name, keys))
    values = np.array([codes[int(tc.name[r])] for r in rows], dtype=np.int64)
    return rows, values


def _profiler_step_number(name: str) -> int | None:
    m = _PROFILER_STEP_RE.match(name)
    return int(m.group(1)) if m else None


def fits_int64(*values: int) -> bool:
    """Whether every value fits in an int64 column."""
    return all(-INT64_MAX <= v <= INT64_MAX for v in values)


def find_steps(tc: TraceColumns) -> RankSteps:
    """The main thread and its ProfilerStep ranges (duplicates of a number keep the first).

    Steps of zero duration are dropped and counted (``Skip.STEP_NOT_POSITIVE``); negative
    durations never get here (the collector skips them).
    """
    rows, numbers = _profiler_step_number_rows(tc)
    pid, tid = find_main_thread(tc, rows)
    on_main = (tc.pid[rows] == pid) & (tc.tid[rows] == tid)
    rows, numbers = rows[on_main], numbers[on_main]
    order = np.argsort(tc.ts[rows], kind="stable")
    rows, numbers = rows[order], numbers[order]
    _, first = np.unique(numbers, return_index=True)
    keep = np.sort(first)
    rows, numbers = rows[keep], numbers[keep]
    empty = tc.dur[rows] <= 0
    if empty.any():
        note(tc.malformed, Skip.STEP_NOT_POSITIVE, -1, tc.name_of(int(rows[empty][0])), int(empty.sum()))
        rows, numbers = rows[~empty], numbers[~empty]
    start, end = tc.ts[rows], tc.ts[rows] + tc.dur[rows]
    return RankSteps(main_tid=tid, main_pid=pid, number=numbers, start=start, end=end,
                     trainsim_step=_trainsim_steps(tc, pid, tid, start, end))


def _profiler_step_number_rows(tc: TraceColumns) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    return _named_rows(tc, _profiler_step_number)


def _trainsim_steps(tc: TraceColumns, pid: int, tid: int, start: npt.NDArray[np.float64],
                    end: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """For each profiler step, the ``trainsim:step K`` starting inside it on the main thread."""
    out = np.full(start.size, -1, dtype=np.int64)
    rows, values = _named_rows(tc, parse_step)
    if rows.size == 0 or start.size == 0:
        return out
    on_main = (tc.pid[rows] == pid) & (tc.tid[rows] == tid)
    idx = enclosing_index(tc.ts[rows[on_main]], start, end)
    ok = idx >= 0
    out[idx[ok]] = values[on_main][ok]
    return out
