"""Simulate the published rows and compare each with its measurement.

Definitions (per row): ``step_err = (simulated - measured) / measured``; tokens/s/GPU = global
batch x sequence length / (step x GPUs); MFU in the simulator's definition (:data:`MFU_DEFINITION`)
for both the measured and the simulated step, beside the source's own figure (``published_mfu``,
by the row's ``mfu_formula``); peak memory: the measured one as the row or its framework defines it (``memory_kind``), the
simulator's in the same kind: allocated, the highest bytes of any simulated rank's memory timeline
(tensors the model holds), or reserved, the caching allocator's per-stream pools each at its peak
(:mod:`sim.memory_pools`; no fragmentation, no CUDA context).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiler.validate.published.jobs import RowJob, job_for_row
from profiler.validate.published.notes import Note, Unexpressible
from profiler.validate.published.rows import PublishedRow
from profiler.validate.published.tuning import tuned_row_job
from schedules.layer_kinds import model_flops_per_step
from sim.job import Job
from sim.memory import GIB
from sim.memory_pools import reserved_peak
from sim.memory_summary import timeline_peak, usable_hbm_bytes
from sim.simulate import simulate
from sim.size_guard import check_size, estimate_job

MFU_DEFINITION = ("model FLOPs per step (forward + backward of every layer and the logits, full s x s "
                  "attention, no recompute: schedules.layer_kinds.model_flops_per_step) / (step time x GPUs x "
                  "the device's dense peak for the compute dtype: BF16's for an FP8 run, whose sources may "
                  "divide by the FP8 peak, twice as high)")
SIM_MEMORY_KIND = "allocated"
RESERVED_DEFINITION = ("the caching allocator's per-stream pools (compute, FSDP2's all-gather and "
                       "reduce-scatter streams) each at its own peak, summed (sim.memory_pools; no "
                       "fragmentation, CUDA context or NCCL buffers)")


@dataclass(frozen=True)
class SimulatedStep:
    """What the simulator predicts for one job."""

    step_s: float
    peak_memory_bytes: float
    reserved_memory_bytes: float
    fits_hbm: bool
    wall_s: float


def simulate_step(job: Job) -> SimulatedStep:
    """Simulate ``job`` (the only call into the simulator here; a faster path replaces it)."""
    start = time.perf_counter()
    result = simulate(job)
    _, peak = timeline_peak(result)
    return SimulatedStep(step_s=result.metrics.step_time_s, peak_memory_bytes=peak,
                         reserved_memory_bytes=reserved_peak(result), fits_hbm=peak <= usable_hbm_bytes(result),
                         wall_s=time.perf_counter() - start)


@dataclass(frozen=True)
class RowResult:
    """One row: its job and simulation, or the reason it was skipped."""

    row: PublishedRow
    row_job: RowJob | None = None
    sim: SimulatedStep | None = None
    reason: str | None = None

    @property
    def skipped(self) -> bool:
        """The row was not simulated (``reason`` says why)."""
        return self.sim is None

    @property
    def assumed(self) -> tuple[Note, ...]:
        return self.row_job.assumed if self.row_job else ()

    @property
    def approx(self) -> tuple[Note, ...]:
        return self.row_job.approx if self.row_job else ()

    @property
    def step_err(self) -> float | None:
        """(simulated - measured) / measured step time."""
        if self.sim is None or self.row.measured_step_s is None:
            return None
        return (self.sim.step_s - self.row.measured_step_s) / self.row.measured_step_s

    @property
    def sim_tokens_per_s_per_gpu(self) -> float | None:
        return None if self.sim is None else self._tokens_per_s_per_gpu(self.sim.step_s)

    def mfu(self, step_s: float | None) -> float | None:
        """MFU (:data:`MFU_DEFINITION`) of this row's job at ``step_s``."""
        if self.row_job is None or step_s is None:
            return None
        job = self.row_job.job
        flops = model_flops_per_step(job.model, job.plan.global_batch)
        return flops / (step_s * job.plan.world_size * job.cluster.device.peak_flops(job.plan.compute_dtype))

    @property
    def sim_memory_kind(self) -> str:
        """What the compared simulated peak is: reserved when the row measured reserved memory
        (:mod:`sim.memory_pools`), else allocated (:mod:`sim.memory_timeline`)."""
        return "reserved" if self.memory_kind == "reserved" else SIM_MEMORY_KIND

    @property
    def sim_allocated_gib(self) -> float | None:
        return None if self.sim is None else self.sim.peak_memory_bytes / GIB

    @property
    def sim_reserved_gib(self) -> float | None:
        return None if self.sim is None else self.sim.reserved_memory_bytes / GIB

    @property
    def sim_peak_memory_gib(self) -> float | None:
        """The simulated peak in the measured figure's kind (:attr:`sim_memory_kind`)."""
        return self.sim_reserved_gib if self.sim_memory_kind == "reserved" else self.sim_allocated_gib

    @property
    def memory_err(self) -> float | None:
        """(simulated - measured) / measured peak memory, where the row publishes one."""
        measured, simulated = self.row.measured_peak_memory_gib, self.sim_peak_memory_gib
        return None if measured is None or simulated is None else (simulated - measured) / measured

    @property
    def memory_kind(self) -> str | None:
        """What the measured peak memory is: the row's ``peak_memory_kind``, else its framework's."""
        if self.row.measured_peak_memory_gib is None:
            return None
        framework = self.row_job.framework.memory_kind if self.row_job else None
        return self.row.peak_memory_kind or framework or "not stated"

    def _tokens_per_s_per_gpu(self, step_s: float) -> float | None:
        if self.row_job is None:
            return None
        job = self.row_job.job
        return job.plan.global_batch * job.model.seq_len / (step_s * job.plan.world_size)


def validate_row(row: PublishedRow) -> RowResult:
    """Simulate one row (or say why it cannot be)."""
    try:
        row_job = job_for_row(row)
    except Unexpressible as exc:
        return RowResult(row=row, reason=str(exc))
    try:  # a row no machine here can simulate is skipped, as the command line refuses such a job
        check_size(estimate_job(row_job.job), "the row's global_batch, layers or seq_len")
    except ValueError as exc:
        return RowResult(row=row, reason=str(exc))
    runs = row_job.pipeline_runs
    row_job, sim = tuned_row_job(row_job, simulate_step if runs == 1 else lambda job: _runs_step(job, runs),
                                 lambda s: s.step_s, lambda s: s.fits_hbm)
    return RowResult(row=row, row_job=row_job, sim=sim)


def _runs_step(job: Job, runs: int) -> SimulatedStep:
    """A step that runs the pipeline schedule ``runs`` times (:attr:`RowJob.pipeline_runs`): ``runs``
    simulated steps of 1/runs of the batch (their extra optimizer steps included)."""
    part = simulate_step(dataclasses.replace(job, plan=dataclasses.replace(
        job.plan, global_batch=job.plan.global_batch // runs)))
    return dataclasses.replace(part, step_s=part.step_s * runs)


def validate_rows(rows: Sequence[PublishedRow],
                  on_row: Callable[[int, int, str], None] | None = None) -> list[RowResult]:
    """Every row in order; ``on_row(i, n, name)`` is called before row i (1-based) of n."""
    out = []
    for i, row in enumerate(rows, start=1):
        if on_row is not None:
            on_row(i, len(rows), row.name)
        out.append(validate_row(row))
    return out
