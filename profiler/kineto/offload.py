"""Offload copies: FSDP2 ``CPUOffloadPolicy``'s host<->device copies, labelled kind "offload".

With ``CPUOffloadPolicy`` FSDP2 (torch 2.13) copies each unit's sharded parameters host to
device inside its ``FSDP::all_gather`` range (``FSDPParam.all_gather_inputs``:
``.to(device, non_blocking=True)``) and each reduced gradient shard device to host inside its
``FSDP::post_backward_reduce`` range (``foreach_reduce``: ``.to("cpu")``). Without offload these
ranges hold neither. So:

- GPU traces: a ``Memcpy HtoD`` / ``Memcpy DtoH`` activity whose CPU launch lies in one of these
  ranges (on the launching thread, else the main thread) is an offload copy.
- CPU traces: a top-level ``aten::to`` / ``aten::_to_copy`` op in one of these ranges is the
  offload call. On a CPU device it moves nothing (the tensor is already on the host and ``to``
  returns it), so its span is the call's overhead. Copies nested inside another op (the
  backward gathers run inside autograd ops) stay part of that op's compute span. With an FSDP2
  ``MixedPrecisionPolicy`` (the trainer uses autocast instead) its dtype casts in these ranges
  are ``aten::to`` as well and would be labelled too.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from profiler.kineto.columns import USER_ANNOTATION, TraceColumns
from profiler.kineto.labels import RangeSet

OFFLOAD = "offload"
OFFLOAD_RANGE_RE = re.compile(r"^FSDP::(?:all_gather|post_backward_reduce)(?: |$)")
HOST_DEVICE_MEMCPY_RE = re.compile(r"^Memcpy (?:HtoD|DtoH)\b")
COPY_OPS = frozenset({"aten::to", "aten::_to_copy"})


def offload_ranges(tc: TraceColumns) -> RangeSet:
    """The rank's FSDP ranges that hold offload copies, per thread (``FSDP::all_gather``,
    ``FSDP::post_backward_reduce``; not ``FSDP::all_gather_copy_out``)."""
    codes = [c for c, n in enumerate(tc.names) if OFFLOAD_RANGE_RE.match(n)]
    rows = np.flatnonzero((tc.cat == USER_ANNOTATION) & np.isin(tc.name, np.asarray(codes, np.int32)))
    return RangeSet(tc.tid[rows], tc.ts[rows], tc.ts[rows] + tc.dur[rows],
                    np.ones(rows.size, np.int64), merge=True)


def _named(tc: TraceColumns, rows: npt.NDArray[np.int64], rule: re.Pattern[str] | frozenset[str]
           ) -> npt.NDArray[np.bool_]:
    match = (lambda n: bool(rule.match(n))) if isinstance(rule, re.Pattern) else rule.__contains__
    flags = np.fromiter((match(n) for n in tc.names), bool, len(tc.names))
    return flags[tc.name[rows]] if rows.size else np.zeros(0, dtype=bool)


def offload_copies(tc: TraceColumns, ranges: RangeSet, rows: npt.NDArray[np.int64], *, gpu: bool,
                   at_tid: npt.NDArray[np.int64], at_t: npt.NDArray[np.float64],
                   main_tid: int) -> npt.NDArray[np.bool_]:
    """Which of ``rows`` are offload copies: host<->device memcpy activities (``gpu``) or copy
    ops (CPU), looked up at (``at_tid``, ``at_t`` µs): their launch, or their own start."""
    out = np.zeros(rows.size, dtype=bool)
    if not ranges or rows.size == 0:
        return out
    candidate = _named(tc, rows, HOST_DEVICE_MEMCPY_RE if gpu else COPY_OPS)
    if gpu:
        candidate &= at_tid >= 0
    if candidate.any():
        out[candidate] = ranges.lookup(at_tid[candidate], at_t[candidate], main_tid) >= 0
    return out
