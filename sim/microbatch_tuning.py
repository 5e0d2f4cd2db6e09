"""The micro-batch size when a job states its batch but not how it is split (``microbatch_size =
"auto"``, or a global batch given without a micro-batch size or count).

Rule: the sizes ``trainsim explore`` sweeps (:data:`sim.explore.spec.MICROBATCH_SIZES`) that divide
the batch per data-parallel rank are each simulated, and the fastest that fits in memory is kept
(ties and nothing fitting: the smallest); a job simulating every rank (``--full``) compares the
sizes on its folded step and simulates only the chosen one in full. It is how throughput tables
are tuned (NVIDIA's NeMo-Megatron-Launcher recipes at 4550dc9f pick 4, 2 or 1 per model and layout:
conf/training/gpt3 5B TP1 PP1 mbs 4, 20B TP2 PP1 mbs 2, 40B TP8 PP2 mbs 1), and the rule
``trainsim validate --published`` applies to a row that omits it
(:mod:`profiler.validate.published.tuning`): one rule for both. The choice comes from the
simulation, never from a measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from schedules.pipeline import build_schedule
from sim.explore.spec import MICROBATCH_SIZES
from sim.job import Job

AUTO = "auto"
Result = TypeVar("Result")


def wants_auto(settings: Mapping[str, Any]) -> bool:
    """The settings leave the micro-batch size to the rule: ``"auto"``, or a global batch with no
    micro-batch size or count."""
    if settings.get("microbatch_size") == AUTO:
        return True
    return "global_batch" in settings and not {"microbatch_size", "microbatches"} & settings.keys()


def candidate_sizes(job: Job, sizes: Sequence[int] = MICROBATCH_SIZES) -> tuple[int, ...]:
    """The sizes among ``sizes`` dividing the job's sequences per data-parallel rank."""
    per_rank = job.plan.global_batch // job.plan.dp
    return tuple(m for m in sizes if per_rank % m == 0) or (1,)


@dataclass(frozen=True)
class Tried(Generic[Result]):
    """One candidate: its key (what was chosen), job and simulation."""

    key: tuple[Any, ...]
    job: Job
    result: Result


def fastest_fitting(tried: Sequence[Tried[Result]], step_s: Callable[[Result], float],
                    fits: Callable[[Result], bool]) -> Tried[Result]:
    """The candidate with the least step time per sequence among those that fit (ties: the smallest
    key); nothing fitting: the first tried."""
    fitting = [t for t in tried if fits(t.result)] or list(tried[:1])
    return min(fitting, key=lambda t: (step_s(t.result) / t.job.plan.global_batch, t.key))


def tune_microbatch(job: Job, simulate: Callable[[Job], Result], step_s: Callable[[Result], float],
                    fits: Callable[[Result], bool], valid_for: Sequence[Job] = ()) -> tuple[Tried[Result], tuple[int, ...]]:
    """The job at its fastest fitting micro-batch size (module docstring) and the sizes tried: those
    every job of ``valid_for`` (e.g. the other schedules of a comparison) also accepts."""
    sizes = candidate_sizes(job)
    jobs = {m: j for m in sizes if (j := at_size(job, m)) is not None
            and all(at_size(other, m) is not None for other in valid_for)}
    if not jobs:  # no size suits the schedule: the smallest, whose simulation says why in one line
        smallest = sizes[0]
        jobs = {smallest: dataclasses.replace(job, plan=dataclasses.replace(job.plan, microbatch_size=smallest))}
    if job.folded or len(jobs) == 1:
        done = [Tried((m,), j, simulate(j)) for m, j in jobs.items()]
        return fastest_fitting(done, step_s, fits), tuple(jobs)
    # Every rank simulated (--full): the sizes compared on the folded step (one rank per pipeline
    # rank: the same rule at a fraction of the time and memory), the chosen size simulated in full.
    folded = [Tried((m,), j, simulate(dataclasses.replace(j, folded=True))) for m, j in jobs.items()]
    best = fastest_fitting(folded, step_s, fits)
    return Tried(best.key, best.job, simulate(best.job)), tuple(jobs)


def at_size(job: Job, size: int) -> Job | None:
    """``job`` split into micro-batches of ``size`` (None when the plan or its pipeline schedule
    refuses that size: DualPipeV needs 2 x pp micro-batches, interleaving a multiple of its rounds)."""
    try:
        plan = dataclasses.replace(job.plan, microbatch_size=size)
        build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    except ValueError:
        return None
    return dataclasses.replace(job, plan=plan)


def choice_note(size: int, sizes: Sequence[int]) -> str:
    """One line saying what the rule chose and how to fix it instead."""
    return (f"micro-batch size {size} (auto: the fastest of {'/'.join(map(str, sizes))} that fits; "
            "--microbatch-size N to fix it)")


def choice_json(size: int, sizes: Sequence[int], rule: str = "the fastest that fits") -> dict[str, Any]:
    """The ``microbatch_size_auto`` object of ``--json``: the size chosen, the sizes tried, the rule."""
    return {"chosen": size, "tried": list(sizes), "rule": f"{rule} (sim/microbatch_tuning.py)"}
