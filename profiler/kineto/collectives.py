"""Collective metadata: kind, message bytes and process group of each communication span.

Where the facts live (see traces-external/FORMAT-NOTES.md):
- new NCCL traces: on the kernel's args and on ``record_param_comms`` — ``Collective name``,
  ``In msg nelems`` (elements, times the ``dtype`` size), ``Process Group Name``,
  ``Process Group Ranks`` (a string such as "[0, 1]");
- old NCCL traces: only the ``nccl:<coll>`` user_annotation around the launch, with
  ``Input Dims`` / ``Input type`` of the input tensor;
- gloo: the ``gloo:<coll>`` range itself carries ``Input Dims`` / ``Input type``.
Bytes are the input message on this rank (for all_gather the local shard, for reduce_scatter
the full input), as ``In msg nelems`` defines it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from profiler.kineto.columns import CPU_OP, USER_ANNOTATION, TraceColumns
from profiler.kineto.groups import parse_ranks
from profiler.kineto.names import call_kind, dtype_bytes, kernel_collective, kernel_kind

MAX_NESTING_SCAN = 16
MAX_ELEMENTS = 1 << 50
"""Largest message accepted, elements (more is taken as unknown size: 0 bytes)."""
MAX_DIMS_DEPTH = 4
MAX_LIST_ITEMS = 1 << 16


@dataclass(frozen=True)
class CommInfo:
    """What one collective span is: kind, bytes, process group name and ranks, call name."""

    kind: str
    nbytes: float
    pg: str
    pg_ranks: tuple[int, ...]
    call: str


def elements(dims: Any, depth: int = 0) -> int:
    """Elements of one tensor's dims ([394241] -> 394241); a TensorList [[a],[b]] sums them.

    0 (unknown) for anything that is not a plausible tensor: negative dims, lists nested
    deeper than ``MAX_DIMS_DEPTH``, or more than ``MAX_ELEMENTS`` elements.
    """
    if not isinstance(dims, list) or depth > MAX_DIMS_DEPTH:
        return 0
    if all(type(d) is int for d in dims):
        if any(d < 0 or d > MAX_ELEMENTS for d in dims):
            return 0
        n = prod(dims) if dims else 1
        return n if n <= MAX_ELEMENTS else 0
    total = sum(elements(d, depth + 1) for d in dims[:MAX_LIST_ITEMS] if isinstance(d, list))
    return total if total <= MAX_ELEMENTS else 0


def bytes_from_input(args: dict[str, Any]) -> float:
    """Bytes of the first input of a profiled range (``Input Dims`` x ``Input type`` size)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not dims or not isinstance(types, list) or not types:
        return 0.0
    return float(elements(dims[0]) * dtype_bytes(types[0]))


def bytes_from_msg(args: dict[str, Any]) -> float | None:
    """``In msg nelems`` x ``dtype`` size (new traces), None when absent."""
    n = args.get("In msg nelems")
    if n is None:
        return None
    try:
        count = int(n)
    except (TypeError, ValueError, OverflowError):
        return None
    if not 0 <= count <= MAX_ELEMENTS:
        return None
    return float(count * dtype_bytes(args.get("dtype", "")))


class CommRanges:
    """The collective CPU ranges of a rank (c10d ops, record_param_comms, nccl:/gloo:) per thread."""

    def __init__(self, tc: TraceColumns) -> None:
        self.tc = tc
        rows = np.array(sorted(tc.args), dtype=np.int64)
        rows = rows[(tc.cat[rows] == CPU_OP) | (tc.cat[rows] == USER_ANNOTATION)] if rows.size else rows
        self._by_tid: dict[int, tuple[list[float], list[int]]] = {}
        for tid in np.unique(tc.tid[rows]):
            r = rows[tc.tid[rows] == tid]
            r = r[np.argsort(tc.ts[r], kind="stable")]
            self._by_tid[int(tid)] = (tc.ts[r].tolist(), r.tolist())

    def containing(self, tid: int, t: float) -> list[int]:
        """Rows of ranges on ``tid`` containing time ``t``, innermost (latest start) first."""
        entry = self._by_tid.get(tid)
        if entry is None:
            return []
        starts, rows = entry
        i = bisect.bisect_right(starts, t) - 1
        out = []
        for j in range(i, max(i - MAX_NESTING_SCAN, -1), -1):
            r = rows[j]
            if self.tc.ts[r] + self.tc.dur[r] >= t:
                out.append(r)
        return out


def _call_facts(tc: TraceColumns, rows: list[int]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(call name, args with msg sizes/groups, args of the nccl:/gloo: annotation) from CPU ranges."""
    call = ""
    meta: dict[str, Any] = {}
    ann: dict[str, Any] = {}
    for r in rows:  # innermost first
        name, args = tc.name_of(r), tc.args.get(r, {})
        if not meta and ("In msg nelems" in args or "Process Group Name" in args):
            meta = args
        if not ann and name.startswith(("nccl:", "gloo:")):
            ann = args
        if not call and call_kind(name) is not None:
            call = name
    if not call and meta.get("Collective name"):
        call = str(meta["Collective name"])
    return call, meta, ann


def nccl_comm_info(tc: TraceColumns, ranges: CommRanges, kernel_row: int, launch_tid: int,
                   launch_ts: float) -> CommInfo:
    """Kind, bytes and group of one NCCL kernel (kernel args first, then the launching call)."""
    kargs = tc.args.get(kernel_row, {})
    cpu_rows = ranges.containing(launch_tid, launch_ts) if launch_tid >= 0 else []
    call, meta, ann = _call_facts(tc, cpu_rows)
    call = str(kargs.get("Collective name") or call)
    kind = kernel_kind(kernel_collective(tc.name_of(kernel_row)))
    if kind is None:
        kind = call_kind(call) or "other"
    nbytes = bytes_from_msg(kargs)
    if nbytes is None:
        nbytes = bytes_from_msg(meta)
    if nbytes is None:
        nbytes = bytes_from_input(ann)
    src = kargs if "Process Group Name" in kargs or "Process Group Ranks" in kargs else meta
    return CommInfo(kind=kind, nbytes=nbytes, pg=str(src.get("Process Group Name", "")),
                    pg_ranks=parse_ranks(src.get("Process Group Ranks")), call=call)
