"""Load one rank's trace file into spans, steps and facts (before the run is assembled)."""

from __future__ import annotations

import logging
import re
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.kineto.columns import GPU_CATEGORIES, TraceColumns
from profiler.kineto.cpu import cpu_spans
from profiler.kineto.gpu import gpu_spans
from profiler.kineto.groups import GroupMap, pg_config_groups
from profiler.kineto.header import distributed_info
from profiler.kineto.labels import LabelIndex
from profiler.kineto.malformed import Malformed, warning_lines
from profiler.kineto.parse_file import read_columns
from profiler.kineto.spans import SpanCols
from profiler.kineto.steps import RankSteps, find_steps

log = logging.getLogger(__name__)
_NAME_RANK_RES = (re.compile(r"rank[-_]?(\d+)", re.I), re.compile(r"(?:worker|device|kineto)[-_]?(\d+)", re.I),
                  re.compile(r"(\d+)"))


@dataclass
class RankData:
    """One rank: spans (file µs), steps, and what the header says."""

    rank: int
    path: Path
    spans: SpanCols
    steps: RankSteps
    base_ns: int
    nbytes: int
    world_size: int | None
    backend: str
    device: str
    device_kind: str
    process_groups: list[dict[str, Any]]
    skipped: dict[str, int] = field(default_factory=dict)
    malformed: Malformed = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def rank_from_name(path: Path) -> int | None:
    """Rank digits in a file name (``rank3.json.gz``, ``worker3_step_12...``), None if none."""
    for pattern in _NAME_RANK_RES:
        m = pattern.search(path.name)
        if m:
            return int(m.group(1))
    return None


def identify_rank(header: dict[str, Any], path: Path) -> tuple[int, int | None, list[str]]:
    """(rank, world_size, warnings) from ``distributedInfo``, falling back to the file name."""
    other = header.get("otherData")
    if isinstance(other, dict) and other.get("generator") == "trainsim":
        raise ValueError(f"{path.name}: a Chrome trace that trainsim wrote ({other.get('source') or 'a timeline'}, "
                         "e.g. simulate --chrome-trace), not a torch.profiler recording; analyze, replay and "
                         "validate read torch.profiler traces (trainsim profile); open this one in Perfetto")
    info = distributed_info(header, path)
    ws = info.get("world_size")
    world_size = int(ws) if isinstance(ws, int) else None
    rank = info.get("rank")
    if isinstance(rank, int):
        return rank, world_size, []
    guessed = rank_from_name(path)
    if guessed is None:
        raise ValueError(f"{path.name}: no distributedInfo.rank and no rank number in the file name")
    return guessed, world_size, [f"{path.name}: no distributedInfo.rank in the trace; took rank "
                                 f"{guessed} from the file name"]


def _device_name(tc: TraceColumns, is_gpu: bool) -> str:
    if not is_gpu:
        host = tc.header.get("host_name")
        return f"CPU ({host})" if host else "CPU"
    devices, counts = np.unique(tc.pid[np.isin(tc.cat, GPU_CATEGORIES)], return_counts=True)
    dev = int(devices[np.argmax(counts)])
    for prop in tc.header.get("deviceProperties") or []:
        if isinstance(prop, dict) and prop.get("id") == dev and prop.get("name"):
            return f"{prop['name']} (device {dev})"
    return f"GPU {dev}"


def load_rank(path: Path, groups: GroupMap, pool: Executor | None = None,
              inflight: int = 4) -> RankData:
    """Read one trace file and turn it into spans (GPU rank if it has GPU events, else CPU).

    ``pool``: worker processes that parse up to ``inflight`` of the file's batches at a time
    (None: parse here).
    """
    tc = read_columns(path, pool=pool, inflight=inflight)
    rank, world_size, warnings = identify_rank(tc.header, path)
    steps = find_steps(tc)
    labels = LabelIndex(tc, steps.main_tid)
    is_gpu = bool(np.isin(tc.cat, GPU_CATEGORIES).any())
    notes: list[str] = []
    if is_gpu:
        spans = gpu_spans(tc, steps, labels, groups)
    else:
        spans, notes = cpu_spans(tc, steps, labels)
    unlinked = int(np.sum((spans["launch_tid"] < 0) & (spans["source"] != "cpu_op")
                          & (spans["source"] != "gloo_call") & (spans["source"] != "gloo_work")))
    if is_gpu and unlinked:
        warnings.append(f"rank {rank}: {unlinked} GPU events have no CPU launch with the same "
                        "correlation id (they get no step or labels, and are dropped when more than one profiler step exists, as HTA does)")
    warnings.extend(f"rank {rank}: {n}" for n in notes)
    transfers = np.isin(spans["source"], ["nccl_kernel", "gloo_work"])
    unsized = int(np.sum(transfers & (spans["bytes"] <= 0)))
    if unsized:
        warnings.append(f"rank {rank}: {unsized} of {int(transfers.sum())} collectives have no "
                        "message size in the trace (bytes=0); gloo traces need record_shapes=True")
    for line in warning_lines(Path(path).name, tc.malformed):
        log.warning(line)
    info = distributed_info(tc.header, path)
    return RankData(rank=rank, path=Path(path), spans=spans, steps=steps, base_ns=tc.base_ns,
                    nbytes=tc.nbytes, world_size=world_size,
                    backend=str(info.get("backend", "")) if isinstance(info, dict) else "",
                    device=_device_name(tc, is_gpu), device_kind="gpu" if is_gpu else "cpu",
                    process_groups=pg_config_groups(tc.header), skipped=dict(tc.skipped),
                    malformed=dict(tc.malformed), warnings=warnings)
