"""``load_run``: a directory of per-rank Kineto traces -> one measured Timeline (+ raw facts).

Conventions (all stated in ``Timeline.meta``):
- Rank from ``distributedInfo.rank`` (file-name digits only as a fallback, with a warning).
- Clock: each file's times are made absolute (``ts`` + ``baseTimeNanoseconds``/1000 in new
  traces) and ranks are aligned on that shared clock; there is no skew correction between hosts.
  Timeline time 0 is the earliest kept span or step start of any rank.
- Steps: ``ProfilerStep#N`` on each rank's main thread; only steps present on every rank are
  used. As HTA does, the last step is dropped (it is often cut short) unless ``all_steps`` or
  there is exactly one step, in which case every event is kept; otherwise an event is kept iff
  its step (CPU: the step containing its start; GPU: the step of its CPU launch) is kept.
- Step label: the trainer's ``trainsim:step K`` inside ProfilerStep#N when present, else N.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from profiler.kineto.groups import GroupMap, read_manifest
from profiler.kineto.infer_groups import infer_gloo_groups
from profiler.kineto.parsed import ParsedRun, assemble
from profiler.kineto.rank import RankData, load_rank
from profiler.kineto.reader import NotATraceError
from profiler.kineto.source import GZIP_MAGIC
from topo.toml_file import node_kind

log = logging.getLogger(__name__)
PARALLEL_MIN_BYTES = 64 << 20
GZIP_RATIO = 8  # rough JSON/gzip size ratio of Kineto traces, to decide on parallel parsing
MAX_WORKERS = 4
INFLIGHT_PER_WORKER = 2
TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = ("manifest.json",)


def find_trace_files(path: Path) -> list[Path]:
    """Trace files of a run: ``path`` itself, or every *.json / *.json.gz in the directory."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.exists() and not path.is_dir():  # a FIFO or a device: never opened (it may block)
        raise ValueError(f"{path}: it is {node_kind(path.stat().st_mode)}, not a trace file or a run directory")
    if not path.is_dir():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    files = sorted(p for p in path.iterdir()
                   if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name not in NOT_TRACES)
    if not files:
        raise ValueError(f"no trace files (*.json, *.json.gz) in {path}")
    return files


def _auto_workers(files: list[Path]) -> int:
    """Parser processes: up to the CPU count (max 4) for runs over 64 MB of JSON, else none."""
    est = 0
    for f in files:
        with f.open("rb") as fh:
            est += f.stat().st_size * (GZIP_RATIO if fh.read(2) == GZIP_MAGIC else 1)
    return min(os.cpu_count() or 1, MAX_WORKERS) if est >= PARALLEL_MIN_BYTES else 1


@contextmanager
def _parser_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    if workers <= 1:
        yield None
        return
    ctx = multiprocessing.get_context("forkserver")  # no fork of a threaded parent
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        yield pool


def _load_file(path: Path, groups: GroupMap, pool: ProcessPoolExecutor | None,
               inflight: int) -> RankData | str:
    """load_rank, falling back to this process if the pool breaks; a str for non-traces."""
    try:
        try:
            return load_rank(path, groups, pool, inflight)
        except (BrokenProcessPool, OSError, pickle.PicklingError) as exc:
            if pool is None:
                raise
            log.warning("parallel parsing failed (%s); parsing %s in this process", exc, path.name)
            return load_rank(path, groups, None)
    except NotATraceError as exc:
        return f"skipped {path.name}: {str(exc).split(': ', 1)[-1]}"


def _load_ranks(files: list[Path], directory: Path, workers: int | None
                ) -> tuple[list[RankData], dict, list[str]]:
    manifest, groups = read_manifest(directory)
    ranks: dict[int, RankData] = {}
    warnings: list[str] = []
    n = _auto_workers(files) if workers is None else workers
    with _parser_pool(n) as pool:
        for f in files:
            data = _load_file(f, groups, pool, INFLIGHT_PER_WORKER * n)
            if isinstance(data, str):
                warnings.append(data)
                continue
            if data.rank in ranks:
                raise ValueError(f"rank {data.rank} appears twice: {ranks[data.rank].path.name} and {f.name}")
            ranks[data.rank] = data
    if not ranks:
        raise ValueError(f"no Kineto traces among the {len(files)} JSON file(s) in {directory}")
    return [ranks[r] for r in sorted(ranks)], manifest or {}, warnings


def _world_size(ranks: list[RankData], warnings: list[str]) -> int:
    sizes = {r.world_size for r in ranks if r.world_size is not None}
    if len(sizes) > 1:
        raise ValueError(f"ranks disagree on world_size: {sorted(sizes)}")
    present = [r.rank for r in ranks]
    world = sizes.pop() if sizes else max(present) + 1
    if not sizes and not any(r.world_size for r in ranks):
        warnings.append(f"no distributedInfo.world_size; assuming {world}")
    bad = [r for r in present if r < 0 or r >= world]
    if bad:
        raise ValueError(f"rank(s) {bad} outside world_size {world}")
    missing = sorted(set(range(world)) - set(present))
    if missing:
        warnings.append(f"traces for {len(present)} of {world} ranks; missing {len(missing)} "
                        f"rank(s): {_ranges(missing)}")
    return world


def _ranges(values: list[int]) -> str:
    """[0,1,2,5] -> "0-2, 5"."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}-{v}" if v != start else f"{v}")
            start = None
    return ", ".join(out)


def select_steps(ranks: list[RankData], all_steps: bool, warnings: list[str]
                 ) -> tuple[list[int], list[int], bool]:
    """(kept profiler steps, dropped ones, keep_everything) — see the module docstring."""
    per_rank = {r.rank: set(int(n) for n in r.steps.number) for r in ranks}
    every = set().union(*per_rank.values())
    if not every:
        warnings.append("no ProfilerStep#N in any trace: kept every event; step labels are -1 "
                        "and step times are undefined")
        return [], [], True
    common = set.intersection(*per_rank.values())
    if not common:
        listing = "; ".join(f"rank {r}: {_steps_text(s)}" for r, s in per_rank.items())
        raise ValueError(f"ranks share no profiler step ({listing})")
    for r, s in per_rank.items():
        if s != common:
            warnings.append(f"rank {r}: dropped profiler step(s) {_steps_text(s - common)} "
                            "missing on other ranks")
    kept = sorted(common)
    if len(kept) == 1 or all_steps:
        dropped: list[int] = []
    else:
        kept, dropped = kept[:-1], kept[-1:]
    return kept, dropped, len(every) == 1


def _steps_text(steps: set[int]) -> str:
    return ", ".join(f"#{s}" for s in sorted(steps)) if steps else "none"


def load_run(path: str | Path, *, all_steps: bool = False, workers: int | None = None) -> ParsedRun:
    """Parse a run: a directory of per-rank traces (or one trace file) into a measured Timeline.

    ``workers``: processes that parse each file's batches in parallel (default: the CPU count,
    at most 4, when the run has over 64 MB of JSON; 1 = everything in this process).

    Raises ValueError (one line) for unusable input: no traces, corrupt or truncated files,
    duplicate ranks, ranks without a common profiler step. Recoverable oddities (missing
    ranks, steps not on every rank, no profiler steps) become ``meta["warnings"]``.
    """
    path = Path(path)
    files = find_trace_files(path)
    directory = path if path.is_dir() else path.parent
    ranks, manifest, warnings = _load_ranks(files, directory, workers)
    world = _world_size(ranks, warnings)
    kept, dropped, keep_all = select_steps(ranks, all_steps, warnings)
    for r in ranks:
        warnings.extend(r.warnings)
    keep = {r.rank: (np.ones(r.spans["pstep"].size, bool) if keep_all
                     else np.isin(r.spans["pstep"], kept)) for r in ranks}
    run = assemble(ranks, keep, kept, dropped, world, manifest, warnings)
    return infer_gloo_groups(run) if run.timeline.meta.backend == "gloo" else run
