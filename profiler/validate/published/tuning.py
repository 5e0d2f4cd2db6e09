"""The micro-batch size of a published benchmark that does not state it.

Throughput tables are tuned: the authors pick, per model, the micro-batch size that runs fastest in
memory. NVIDIA's own NeMo-Megatron-Launcher recipes show it (conf/training/gpt3 at 4550dc9f: 5B
TP1 PP1 mbs 4, 20B TP2 PP1 mbs 2, 40B TP8 PP2 mbs 1, 175B TP4 PP8 mbs 1): no fixed value, the
size chosen per model and parallel layout. So a row that states its batch per data-parallel rank
but not the micro-batch size is run at each size ``trainsim explore`` sweeps by default
(:data:`sim.explore.spec.MICROBATCH_SIZES`) that divides that batch, and the fastest one that fits
in HBM is reported (ties and nothing fitting: the smallest), marked ``assumed mbs`` with the
choice. Which size wins follows from the simulator's own timeline and memory model, never from the
measured step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from profiler.validate.published.jobs import RowJob
from profiler.validate.published.notes import Note
from schedules.plan.runtime import RECOMPUTE_KINDS
from sim.job import Job
from sim.microbatch_tuning import Tried, fastest_fitting

Step = TypeVar("Step")


def tuned_row_job(row_job: RowJob, simulate: Callable[[Job], Step],
                  step_s: Callable[[Step], float], fits: Callable[[Step], bool]) -> tuple[RowJob, Step]:
    """``row_job`` at its tuned micro-batch size (and, for a ``ratio_only`` row, recompute mode)
    and that choice's simulation (``simulate`` runs a job; ``step_s`` and ``fits`` read its step
    time in seconds and whether it fits HBM). The fastest is the one with the least time per
    sequence (step / global batch: the batch is fixed, or one micro-batch per step)."""
    if not row_job.microbatch_choices and not row_job.recompute_choices:
        return row_job, simulate(row_job.job)
    tried: list[tuple[tuple[int, str], RowJob, Step]] = []
    plan = row_job.job.plan
    for size in row_job.microbatch_choices or (plan.microbatch_size,):
        for recompute in row_job.recompute_choices or (plan.recompute,):
            candidate = _with_choice(row_job, size, recompute)
            if candidate is not None:
                tried.append(((size, recompute), candidate, simulate(candidate.job)))
    candidates = [Tried((size, RECOMPUTE_KINDS.index(recompute)), row.job, ((size, recompute), row, step))
                  for (size, recompute), row, step in tried]
    best = fastest_fitting(candidates, lambda t: step_s(t[2]), lambda t: fits(t[2]))
    choice, chosen, result = best.result
    return dataclasses.replace(chosen, assumed=_notes(row_job, chosen, choice, tried)), result


def _notes(row_job: RowJob, chosen: RowJob, choice: tuple[int, str],
           tried: list[tuple[tuple[int, str], RowJob, Step]]) -> tuple[Note, ...]:
    """The chosen job's assumptions with the tuned choices stated."""
    notes = {n.code: n for n in chosen.assumed}
    if row_job.microbatch_choices:
        sizes = "/".join(dict.fromkeys(str(t[0][0]) for t in tried))
        notes["mbs"] = Note("mbs", f"micro-batch size not stated: {choice[0]}, the fastest of {sizes} that fits "
                                   "HBM (a tuned benchmark's choice; see profiler.validate.published.tuning)")
    if row_job.recompute_choices:
        notes["recompute"] = Note("recompute", f"activation checkpointing not stated: {choice[1]}, the fastest of "
                                               f"{'/'.join(row_job.recompute_choices)} that fits HBM (the source "
                                               "tuned it per twin)")
    return tuple(notes.values())


def _with_choice(row_job: RowJob, size: int, recompute: str) -> RowJob | None:
    """The same job at micro-batch ``size`` and ``recompute`` (None when the plan rejects it, e.g.
    an interleaved schedule whose micro-batch count the pipeline does not divide). Without a stated
    batch (one micro-batch per step) the global batch follows the size."""
    old = row_job.job.plan
    batch = old.global_batch if row_job.fixed_batch else old.global_batch // old.microbatch_size * size
    try:
        plan = dataclasses.replace(old, microbatch_size=size, recompute=recompute, global_batch=batch)
        job = dataclasses.replace(row_job.job, plan=plan)
    except ValueError:
        return None
    return dataclasses.replace(row_job, job=job)
