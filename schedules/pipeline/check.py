"""Completeness check of a schedule: every stage runs every micro-batch's passes exactly once,
on the rank the stage map assigns it, with the chunk index that map gives."""

from __future__ import annotations

from collections import Counter

from core.errors import invalid
from core.vocab import Phase
from schedules.actions import PipelineSchedule, stage_chunk


def check_schedule(schedule: PipelineSchedule) -> None:
    """Raise ``ValueError`` unless each (stage, phase, micro-batch) occurs once where it belongs.

    Phases are F and B for every stage and micro-batch, plus W when the schedule splits backward.
    """
    phases: tuple[str, ...] = (Phase.F, Phase.B, Phase.W) if schedule.split_backward else (Phase.F, Phase.B)
    expected = Counter((s, p, mb) for s in range(schedule.num_stages) for p in phases
                       for mb in range(schedule.microbatches))
    seen: Counter[tuple[int, str, int]] = Counter()
    for rank, order in enumerate(schedule.orders):
        for action in order:
            if schedule.rank_of(action.stage) != rank:
                raise invalid("schedule", schedule.name, f"{action} runs on rank {rank}, "
                              f"but stage {action.stage} lives on rank {schedule.rank_of(action.stage)}")
            if action.chunk != stage_chunk(action.stage, schedule.pp, schedule.stage_map):
                raise invalid("schedule", schedule.name, f"{action} has chunk {action.chunk}")
            seen[action.stage, action.phase, action.microbatch] += 1
    if seen != expected:
        extra, missing = seen - expected, expected - seen
        raise invalid("schedule", schedule.name,
                      f"actions missing {sorted(missing)[:5]} or repeated/unknown {sorted(extra)[:5]}")
