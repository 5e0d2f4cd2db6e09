"""Labels from enclosing CPU ranges: phase (fwd/bwd/optimizer), stage, chunk, micro-batch, layer.

A point (thread, time) — a CPU op's start, or the CPU launch of a GPU kernel — takes the labels of
the ranges that contain it on its own thread; where its thread has none (autograd or collective
worker threads) it falls back to the main thread's ranges at that time (the main thread is inside
``backward()`` while the autograd thread works).

Sources, in priority order for the phase: trainsim action ranges (``trainsim:F/B/W ...``, see
profiler/annotations.py; B is ``bwd_input`` when the rank has W actions, else ``bwd``),
then optimizer ranges (``trainsim:optimizer``, ``Optimizer.step#...``), backward ranges
(``... backward ...`` annotations, ``autograd::engine::evaluate_function`` ops), forward ranges
(``... forward ...``). Ranges of one kind are assumed not to nest inside each other (actions,
layers); phase ranges are merged into unions first, so their nesting does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.vocab import Kind
from profiler.annotations import parse_action, parse_layer
from profiler.kineto.columns import CPU_OP, USER_ANNOTATION, TraceColumns
from profiler.kineto.malformed import Skip, note
from profiler.kineto.names import phase_of_range
from profiler.kineto.steps import fits_int64
from sim.intervals import enclosing_index, union

PHASES = (Kind.OPTIMIZER, Kind.BWD, Kind.FWD)
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function"


class RangeSet:
    """Per-thread ranges with an integer value each; lookup returns the value or -1."""

    def __init__(self, tids: npt.NDArray[np.int64], starts: npt.NDArray[np.float64],
                 ends: npt.NDArray[np.float64], values: npt.NDArray[np.int64], merge: bool = False):
        self._by_tid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for tid in np.unique(tids):
            sel = tids == tid
            s, e, v = starts[sel], ends[sel], values[sel]
            if merge:
                s, e = union(s, e)
                v = np.ones(s.size, dtype=np.int64)
            if s.size == 0:  # only zero-length ranges on this thread: none contains a point
                continue
            order = np.argsort(s, kind="stable")
            self._by_tid[int(tid)] = (s[order], e[order], v[order])

    def __bool__(self) -> bool:
        return bool(self._by_tid)

    def _lookup_tid(self, tid: int, points: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        ranges = self._by_tid.get(tid)
        if ranges is None:
            return np.full(points.size, -1, dtype=np.int64)
        s, e, v = ranges
        idx = enclosing_index(points, s, e)
        return np.where(idx >= 0, v[np.maximum(idx, 0)], -1)

    def lookup(self, tids: npt.NDArray[np.int64], points: npt.NDArray[np.float64],
               main_tid: int) -> npt.NDArray[np.int64]:
        """Value of the range containing each (tid, point); main-thread fallback; -1 if none."""
        out = np.full(points.size, -1, dtype=np.int64)
        if not self._by_tid or points.size == 0:
            return out
        for tid in np.unique(tids):
            sel = tids == tid
            out[sel] = self._lookup_tid(int(tid), points[sel])
        miss = (out < 0) & (tids != main_tid)
        if miss.any():
            out[miss] = self._lookup_tid(main_tid, points[miss])
        return out


@dataclass(frozen=True)
class Labels:
    """Labels per queried point (object array of phase names; ints are -1 when unknown)."""

    phase: npt.NDArray[np.object_]
    stage: npt.NDArray[np.int64]
    chunk: npt.NDArray[np.int64]
    microbatch: npt.NDArray[np.int64]
    layer: npt.NDArray[np.int64]


class LabelIndex:
    """Label ranges of one rank, built once and queried for many points."""

    def __init__(self, tc: TraceColumns, main_tid: int) -> None:
        self.main_tid = main_tid
        ann = np.flatnonzero(tc.cat == USER_ANNOTATION)
        ops = np.flatnonzero(tc.cat == CPU_OP)
        end = tc.ts + tc.dur
        self._actions = _action_table(tc, ann)
        has_w = any(n.startswith("trainsim:W ") for n in tc.names)
        self._b_kind = "bwd_input" if has_w else "bwd"
        self.layers = _parsed_ranges(tc, ann, end, parse_layer)
        self.phases = {p: self._phase_ranges(tc, ann, ops, end, p) for p in PHASES}

    @staticmethod
    def _phase_ranges(tc: TraceColumns, ann: npt.NDArray[np.int64], ops: npt.NDArray[np.int64],
                      end: npt.NDArray[np.float64], phase: str) -> RangeSet:
        """Union per thread of the annotations (and, for bwd, autograd ops) implying ``phase``."""
        ann_codes = [c for c, n in enumerate(tc.names) if phase_of_range(n) == phase]
        rows = ann[np.isin(tc.name[ann], np.asarray(ann_codes, dtype=np.int32))]
        if phase == Kind.BWD:
            op_codes = [c for c, n in enumerate(tc.names) if n.startswith(AUTOGRAD_PREFIX)]
            rows = np.concatenate([rows, ops[np.isin(tc.name[ops], np.asarray(op_codes, np.int32))]])
        return RangeSet(tc.tid[rows], tc.ts[rows], end[rows], np.ones(rows.size, np.int64),
                        merge=True)

    def lookup(self, tids: npt.NDArray[np.int64], points: npt.NDArray[np.float64]) -> Labels:
        """Labels of each (thread, time µs) point."""
        n = points.size
        phase = np.full(n, "other", dtype=object)
        for p in reversed(PHASES):  # lowest priority first, later ones overwrite
            phase[self.phases[p].lookup(tids, points, self.main_tid) >= 0] = p
        rs, table = self._actions
        idx = rs.lookup(tids, points, self.main_tid)
        hit = idx >= 0
        kinds = np.array(["fwd", self._b_kind, "bwd_weight"], dtype=object)
        phase[hit] = kinds[table[idx[hit], 0]]
        cols = [np.full(n, -1, dtype=np.int64) for _ in range(3)]
        for k in range(3):
            cols[k][hit] = table[idx[hit], k + 1]
        layer = self.layers.lookup(tids, points, self.main_tid)
        return Labels(phase=phase, stage=cols[0], chunk=cols[1], microbatch=cols[2], layer=layer)


def _action_table(tc: TraceColumns, ann: npt.NDArray[np.int64]) -> tuple[RangeSet, np.ndarray]:
    """RangeSet over trainsim action ranges (value = row of table [phase, stage, chunk, mb])."""
    parsed = {}
    for code, name in enumerate(tc.names):
        a = parse_action(name)
        if a is not None and not fits_int64(a.stage, a.chunk, a.microbatch):
            note(tc.malformed, Skip.NUMBER_TOO_LARGE, -1, name, int(np.count_nonzero(tc.name == code)))
        elif a is not None:
            parsed[code] = ("FBW".index(a.phase), a.stage, a.chunk, a.microbatch)
    rows = ann[np.isin(tc.name[ann], np.fromiter(parsed.keys(), np.int32, len(parsed)))]
    table = np.array([parsed[int(tc.name[r])] for r in rows], dtype=np.int64).reshape(-1, 4)
    rs = RangeSet(tc.tid[rows], tc.ts[rows], tc.ts[rows] + tc.dur[rows],
                  np.arange(rows.size, dtype=np.int64))
    return rs, table


def _parsed_ranges(tc: TraceColumns, ann: npt.NDArray[np.int64], end: npt.NDArray[np.float64],
                   parse: object) -> RangeSet:
    values = {}
    for code, name in enumerate(tc.names):
        v = parse(name)  # type: ignore[operator]
        if v is not None and not fits_int64(int(v)):
            note(tc.malformed, Skip.NUMBER_TOO_LARGE, -1, name, int(np.count_nonzero(tc.name == code)))
        elif v is not None:
            values[code] = int(v)
    rows = ann[np.isin(tc.name[ann], np.fromiter(values.keys(), np.int32, len(values)))]
    vals = np.array([values[int(tc.name[r])] for r in rows], dtype=np.int64)
    return RangeSet(tc.tid[rows], tc.ts[rows], end[rows], vals)
