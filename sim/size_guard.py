"""Size guard: how big a run will be, estimated before anything is built.

A plan's cost grows with its micro-batches, layers, simulated ranks and steps; a few flags
(``--global-batch 100000000``, ``--steps 1000000``, ``--nodes 1000000``, ``schedule --pp
1000000``) ask for more memory than the machine has or for hours of work. Each command
estimates its run first (:func:`estimate_job`, :func:`estimate_playground`,
:func:`estimate_explore_plan`) and

- refuses, with a one-line error naming the flags that shrink it, a run whose estimated memory
  exceeds half of this machine's memory (:func:`check_size`);
- announces on stderr a run estimated to take more than :data:`NOTICE_SECONDS` (:func:`notice`).

The constants are measured on this project's simulator (``bench/size_guard_calibration.py``
reprints them): a timeline span (one op of one micro-batch on one rank, with ``detail="op"``)
costs ~450 bytes and ~3 us (a many-step run measured 5 us); a task ~1.2 KB and 13 us on the list engine (65 us on the SimPy
engine); a cluster node's topology ~40 KB and 1.5 ms; a playground action ~4 KB and ~250 us to simulate
and draw. They are upper estimates: real runs measured 0.6-1.0x of them (``tests/sim/test_size_guard.py``
checks the task estimate against built graphs).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from schedules.layer_kinds import layer_kind
from schedules.plan import ParallelPlan
from sim.job import Job

SPAN_BYTES = 450.0
SPAN_SECONDS = 3e-6
TASK_BYTES = 1200.0
TASK_SECONDS_LIST = 13e-6
TASK_SECONDS_SIMPY = 65e-6
NODE_BYTES = 40e3
NODE_SECONDS = 1.5e-3  # building and routing over a cluster node's topology (20,000 nodes: 30 s, 0.9 GB)
ACTION_BYTES = 4000.0
ACTION_SECONDS = 250e-6
SPANS_PER_LAYER_MICROBATCH = 24  # ops of one layer's forward + backward on one rank, with detail="op"
OP_DETAIL_MAX_TASKS = 200_000  # above this many estimated tasks, detail "auto" writes one span per task and lane
NOTICE_SECONDS = 10.0
MEMORY_FRACTION = 0.5  # a run may use at most this share of the machine's memory


@dataclass(frozen=True)
class SizeEstimate:
    """A run's estimated size.

    Attributes:
        tasks: task-graph tasks (or playground actions).
        spans: timeline spans.
        bytes: memory the run needs, bytes.
        seconds: CPU time it takes, seconds.
    """

    tasks: int
    spans: int
    bytes: float
    seconds: float

    def describe(self) -> str:
        """``~1.2M tasks, ~3.4 GiB, ~12 s``."""
        return f"~{_count(self.tasks)} tasks, ~{self.bytes / 2**30:.1f} GiB, ~{_duration(self.seconds)}"


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def _duration(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def machine_memory_bytes() -> float:
    """Physical memory of this machine, bytes (16 GiB when the OS does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16.0 * 2**30


def memory_budget_bytes() -> float:
    """What one run may use: :data:`MEMORY_FRACTION` of the machine's memory."""
    return MEMORY_FRACTION * machine_memory_bytes()


def estimate_plan_tasks(plan: ParallelPlan, layers: int, ranks: int, steps: int = 1, compute_splits: int = 1) -> int:
    """Tasks of the task graph of ``plan`` on ``ranks`` simulated ranks: per rank and micro-batch
    3 per chunk (forward, backward, send) and one more when interleaved, ZeRO-3 4 per layer
    more (gathers, reduce-scatters), one per layer more for each further piece a block's compute
    is cut into (``compute_splits``, the layer kind's: MoE's expert all-to-alls); per rank and
    step, ~2 per layer of DP reductions and the optimizer (fitted to built graphs,
    ``tests/sim/test_size_guard.py``)."""
    stage_layers = math.ceil(layers / plan.pp)
    per_microbatch = 3 * plan.vpp + (plan.vpp > 1) + (4 * stage_layers if plan.zero == 3 else 0)
    per_microbatch += stage_layers * (compute_splits - 1)  # e.g. expert dispatch/combine split each layer's compute
    return steps * ranks * (plan.num_microbatches * per_microbatch + 2 * stage_layers + 10)


def _job_tasks(job: Job) -> int:
    """:func:`estimate_plan_tasks` for ``job``'s simulated ranks and steps."""
    plan = job.plan
    ranks = plan.pp if job.folded else plan.world_size
    return estimate_plan_tasks(plan, job.model.num_layers, ranks, job.steps, layer_kind(job.model).compute_splits)


def span_detail(job: Job) -> str:
    """The span detail :func:`sim.simulate.simulate` writes: ``job.detail``, or for "auto" one span
    per op while the job's estimated tasks are at most :data:`OP_DETAIL_MAX_TASKS`, else one per
    task and lane. The estimate (not the built graph) decides, so this guard counts exactly the
    kind of spans the run writes."""
    return _span_detail(job, _job_tasks(job))


def _span_detail(job: Job, tasks: int) -> str:
    """:func:`span_detail` given the job's estimated ``tasks``."""
    if job.detail != "auto":
        return job.detail
    return "op" if tasks <= OP_DETAIL_MAX_TASKS else "task"


def estimate_job(job: Job) -> SizeEstimate:
    """Size of :func:`sim.simulate.simulate` on ``job`` (every micro-batch's spans are written,
    with or without the steady-state shortcut)."""
    plan = job.plan
    ranks = plan.pp if job.folded else plan.world_size
    tasks = _job_tasks(job)
    op_spans = job.steps * ranks * plan.num_microbatches * math.ceil(job.model.num_layers / plan.pp) \
        * SPANS_PER_LAYER_MICROBATCH * layer_kind(job.model).compute_splits + tasks
    spans = op_spans if _span_detail(job, tasks) == "op" else 3 * tasks
    simpy = job.cluster.intra_node == "host" or job.fidelity == "flow" or job.jitter_cv > 0
    per_task = TASK_SECONDS_SIMPY if simpy else TASK_SECONDS_LIST
    timings = 2 if job.interference else 1
    return SizeEstimate(tasks=tasks, spans=spans,
                        bytes=tasks * TASK_BYTES + spans * SPAN_BYTES + job.cluster.nodes * NODE_BYTES,
                        seconds=tasks * per_task * timings + spans * SPAN_SECONDS
                        + job.cluster.nodes * NODE_SECONDS)


def estimate_playground(pp: int, microbatches: int, vpp: int, schedules: int = 1) -> SizeEstimate:
    """Size of ``trainsim schedule``: forward, backward and weight actions of every micro-batch,
    chunk and rank, for each schedule."""
    actions = schedules * pp * microbatches * vpp * 3
    return SizeEstimate(tasks=actions, spans=actions, bytes=actions * ACTION_BYTES, seconds=actions * ACTION_SECONDS)


def estimate_explore_plan(plan: ParallelPlan) -> SizeEstimate:
    """Size of evaluating one plan in ``trainsim explore`` (its schedule and folded template graph;
    long steps are shortened by their steady state where it repeats, but not every schedule does)."""
    return estimate_playground(plan.pp, plan.num_microbatches, plan.vpp)


def explore_plan_budget_bytes() -> float:
    """What evaluating one explore plan may use: 1/8 of the run's budget (several workers, each
    with its caches, run at once)."""
    return memory_budget_bytes() / 8


def check_size(estimate: SizeEstimate, reduce: str, budget: float | None = None) -> None:
    """Raise a one-line ValueError when ``estimate`` needs more than ``budget`` bytes (default
    :func:`memory_budget_bytes`); ``reduce`` names the flags that make the run smaller."""
    limit = memory_budget_bytes() if budget is None else budget
    if estimate.bytes > limit:
        raise ValueError(f"this run is too large for this machine: {estimate.describe()} (the limit is "
                         f"{limit / 2**30:.1f} GiB, half its memory); reduce {reduce}")


def notice(estimate: SizeEstimate, what: str = "this run") -> None:
    """One line on stderr when ``estimate`` takes more than :data:`NOTICE_SECONDS`."""
    if estimate.seconds > NOTICE_SECONDS:
        print(f"trainsim: {what} is large ({estimate.describe()}); it may take a while", file=sys.stderr)


JOB_REDUCE = "--global-batch/--microbatches, --steps, --nodes, or drop --full/--detail op"


def guard_job(job: Job) -> SizeEstimate:
    """:func:`check_size` and :func:`notice` for a simulated job; its estimate."""
    estimate = estimate_job(job)
    check_size(estimate, JOB_REDUCE)
    notice(estimate)
    return estimate
