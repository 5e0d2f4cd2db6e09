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
from sim.job import Job

Step = TypeVar("Step")


def tuned_row_job(row_job: RowJob, simulate: Callable[[Job], Step],
                  step_s: Callable[[Step], float], fits: Callable[[Step], bool]) -> tuple[RowJob, Step]:
    """``row_job`` at its tuned micro-batch size and that size's simulation (``simulate`` runs a job;
    ``step_s`` and ``fits`` read its step time in seconds and whether it fits HBM)."""
    if not row_job.microbatch_choices:
        return row_job, simulate(row_job.job)
    tried: list[tuple[int, RowJob, Step]] = []
    for size in row_job.microbatch_choices:
        candidate = _with_microbatch(row_job, size)
        if candidate is not None:
            tried.append((size, candidate, simulate(candidate.job)))
    fitting = [t for t in tried if fits(t[2])] or tried[:1]
    size, chosen, result = min(fitting, key=lambda t: (step_s(t[2]), t[0]))
    sizes = "/".join(str(t[0]) for t in tried)
    note = Note("mbs", f"micro-batch size not stated: {size}, the fastest of {sizes} that fits HBM "
                       "(a tuned benchmark's choice; see profiler.validate.published.tuning)")
    assumed = tuple(note if n.code == "mbs" else n for n in chosen.assumed)
    return dataclasses.replace(chosen, assumed=assumed), result


def _with_microbatch(row_job: RowJob, size: int) -> RowJob | None:
    """The same job at micro-batch ``size`` (None when the plan rejects it, e.g. an interleaved
    schedule whose micro-batch count the pipeline does not divide)."""
    try:
        plan = dataclasses.replace(row_job.job.plan, microbatch_size=size)
        job = dataclasses.replace(row_job.job, plan=plan)
    except ValueError:
        return None
    return dataclasses.replace(row_job, job=job)
