"""Build the replay model of a parsed run: items, matching, dependencies, parameters."""

from __future__ import annotations

import pandas as pd

from profiler.kineto.parsed import ParsedRun
from profiler.measured import measured_timeline
from profiler.replay.cpu_side import cpu_side_items
from profiler.replay.fsdp_waits import fsdp_wait_points
from profiler.replay.items import cpu_main_threads, marker_items, order_items, timeline_items
from profiler.replay.matching import match_communication
from profiler.replay.model import ReplayModel, build_model
from sim.metrics import rank_step_table

MIN_MATCHED_FRACTION = 0.5


class MatchingError(ValueError):
    """The run's collectives cannot be matched across ranks (one-line message)."""


def is_gpu_run(run: ParsedRun) -> bool:
    """A run with device (GPU) traces, as opposed to CPU-only gloo traces."""
    return "gpu" in str(run.timeline.meta.device_kind or "")


def run_items(run: ParsedRun) -> tuple[pd.DataFrame, dict[int, int]]:
    """All items of the run (Timeline spans, CPU side of GPU runs, step markers), ordered."""
    spans = timeline_items(run)
    if is_gpu_run(run):
        cpu = cpu_side_items(run, spans)
        main, parts = cpu.main_tid, [spans, cpu.items]
    else:
        main, parts = cpu_main_threads(spans), [spans]
    parts.append(marker_items(run, main))
    items = pd.concat([p for p in parts if len(p)], ignore_index=True)
    return order_items(items), main


def build_replay_model(run: ParsedRun, *, allow_partial: bool = False) -> ReplayModel:
    """The replay model of ``run``.

    Raises MatchingError when fewer than half of the communication spans find their peers
    (unless ``allow_partial``): the traces are then probably not of one job and one step.
    """
    items, main = run_items(run)
    world = int(run.timeline.meta.world_size or len(run.timeline.ranks))
    matching = match_communication(items, world)
    if matching.matched_fraction < MIN_MATCHED_FRACTION and not allow_partial:
        raise MatchingError(
            f"collectives cannot be matched across ranks: only {matching.comm_items - len(matching.unmatched)} "
            f"of {matching.comm_items} communication spans found their peers (by process group and "
            "sequence number, then by completion time); are the traces of one job and one step? "
            "(--allow-partial replays the unmatched ones uncoupled)")
    waits = [] if is_gpu_run(run) else fsdp_wait_points(run, items)
    model = build_model(items, matching, is_gpu_run(run), main, world, waits)
    model.notes[:0] = matching.notes
    model.measured = _measured(run)
    return model


def _measured(run: ParsedRun) -> dict[str, object]:
    """The measured Timeline (with step windows and stages) and its per-rank step table."""
    tl = measured_timeline(run)
    return {"timeline": tl, "table": rank_step_table(tl), "warnings": list(run.warnings)}
