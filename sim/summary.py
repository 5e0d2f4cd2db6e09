"""The ``simulate --json`` object: stable keys, rounded numbers, the resolved config."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from schedules.layer_kinds import model_flops_per_step
from schedules.plan import ParallelPlan
from sim.accuracy.summary import band_object, job_band
from sim.flow.describe import approximations
from sim.job import describe_job
from sim.memory_summary import HBM_RESERVE_FRACTION, memory_summary, summary_fits, usable_hbm_bytes
from sim.metrics import compute_flops
from sim.simulate import SimulationResult
from topo.variability import slowest_gpu_factor

__all__ = ["HBM_RESERVE_FRACTION", "summarize", "usable_hbm_bytes"]

# the figures a comparison shows per simulated job (compare's table and report)
SUMMARY_KEYS = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "bubble_fraction",
                "exposed_comm_fraction", "comm_overlap_fraction", "peak_memory_gib", "fits", "cost_per_step_usd")
NOT_MODELED = "no data loading, checkpointing, stragglers or failures"
APPROXIMATIONS = (
    "analytic network: collectives are priced by NCCL's latency/bandwidth model on the links their "
    "rings or trees use; concurrent transfers of different streams share a node's network equally; "
    "no flow-level congestion",
    "tensor/context-parallel collectives run inside the layer that needs them and are not slowed by "
    "other traffic",
    "compute: GEMMs by shape (tile and wave quantisation) from component benchmarks; attention at the "
    "measured FlashAttention-2 rate; no power-limit throttling",
    NOT_MODELED,
)


def round_sig(x: float, digits: int = 9) -> float:
    """``x`` rounded to ``digits`` significant digits (stable JSON across platforms)."""
    if abs(x) < 1e-12 or not math.isfinite(x):  # float round-off around zero prints as 0
        return 0.0 if math.isfinite(x) else float(x)
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def hardware_flops(result: SimulationResult) -> float:
    """FLOPs the GPUs execute per step (recomputation included, causal attention halves), from
    the Timeline's compute spans; a folded simulated rank stands for world/simulated ranks."""
    if result.window is not None:  # one step, from the window (sim.window_step)
        per_step = result.window.compute_flops
    else:
        per_step = compute_flops(result.timeline) / max(1, len(result.timeline.steps))
    return per_step * result.job.plan.world_size / max(1, len(result.simulated_ranks))


def summarize(result: SimulationResult) -> dict[str, Any]:
    """One JSON-ready object describing the simulated step."""
    job, m = result.job, result.metrics
    plan, model = job.plan, job.model
    world = plan.world_size
    step = m.step_time_s
    flops = model_flops_per_step(model, plan.global_batch)
    peak = job.cluster.device.peak_flops(plan.compute_dtype)
    mem = result.memory[result.peak_rank]
    memory = memory_summary(result)
    return {
        "world_size": world,
        "num_params": model.num_params(),
        "step_time_s": round_sig(step),
        "tokens_per_s": round_sig(plan.global_batch * model.seq_len / step),
        "tflops_per_gpu": round_sig(flops / step / world / 1e12),
        "mfu": round_sig(flops / (step * world * peak)),  # against the BF16 (compute dtype) peak
        "mfu_fp8_peak": round_sig(flops / (step * world * job.cluster.device.peak_flops("fp8")))
        if plan.dtype == "fp8" else None,
        "hardware_tflops_per_gpu": round_sig(hardware_flops(result) / step / world / 1e12),
        "bubble_fraction": round_sig(m.bubble_fraction),
        "exposed_comm_fraction": round_sig(m.exposed_comm_fraction),
        "comm_overlap_fraction": round_sig(m.comm_overlap_fraction),
        "peak_memory_gib": memory["peak_gib"],  # the one peak: most HBM allocated at any instant (timeline)
        "fits": summary_fits(memory),  # memory timeline peak vs HBM - reserve; host DRAM/NVMe when offloading
        "memory_gib": mem.gib(),  # each category at its own maximum (static breakdown; they need not coincide)
        "memory_timeline": memory,
        "cost_per_step_usd": round_sig(step / 3600 * world * job.cluster.price_per_gpu_hour_usd),
        "error_band": band_object(job_band(job), step),
        "fidelity": job.fidelity,
        "config": resolved_config(result),
        "simulation": {
            "folded": job.folded, "simulated_ranks": len(result.simulated_ranks), "steps": job.steps,
            "spans": result.span_count, "detail": result.meta.detail,
            "steady_state": steady_state_summary(result),
            "peak_memory_rank": memory["rank"], "hbm_reserve_fraction": HBM_RESERVE_FRACTION,
            "jitter_cv": job.jitter_cv,
            "gpu_speed_cv": job.cluster.device.speed_cv,
            "compute_pace": round_sig(slowest_gpu_factor(job.cluster.device.speed_cv, world)),
            "approximations": approximations(job.fidelity, straggler_approximations(
                job.jitter_cv, job.cluster.device.speed_cv, world)),
        },
    }


def steady_state_summary(result: SimulationResult) -> dict[str, Any]:
    """How many of a step's micro-batches were simulated: all (and why, ``fallback``), or a
    shorter step whose period of ``period_microbatches`` was repeated ``copies`` times."""
    m = result.job.plan.num_microbatches
    ext = result.steady_state
    if ext is None:
        return {"microbatches": m, "simulated_microbatches": m, "period_microbatches": None, "copies": 0,
                "fallback": result.steady_fallback or None}
    return {"microbatches": m, "simulated_microbatches": ext.simulated_microbatches,
            "period_microbatches": ext.period_microbatches, "copies": ext.copies, "fallback": None}


SWEEP_VARIATION = ("GPU speed variation: compute runs at each design's slowest GPU's pace, 1 + its device's "
                   "speed CV (0.0098 for GPU presets, Sinha et al. SC'22) x E[max of its GPU count's normals]")


def straggler_approximations(jitter_cv: float, speed_cv: float = 0.0, gpus: int | None = 1) -> tuple[str, ...]:
    """The approximation lines for the variation models in use: part-to-part GPU speed
    (``speed_cv`` over ``gpus``; ``gpus`` None: a sweep over designs, :data:`SWEEP_VARIATION`)
    and step-to-step jitter (none, or the expected value)."""
    parts = []
    if gpus is None:
        parts.append(SWEEP_VARIATION)
    elif speed_cv > 0 and gpus > 1:
        pace = slowest_gpu_factor(speed_cv, gpus)
        parts.append(f"GPU speed variation: compute runs at the slowest of {gpus} GPUs' pace, "
                     f"+{100 * (pace - 1):.1f}% (speed CV {speed_cv:g}, Sinha et al. SC'22)")
    if jitter_cv > 0:
        parts.append(f"stragglers as an expected value (jitter_cv {jitter_cv:g}): each collective starts cv x "
                     f"(its members' compute since their previous collective) x E[max of n normals] after its "
                     f"last arrival")
    else:
        parts.append("no step-to-step jitter")
    line = "; ".join([*parts, "no data loading, checkpointing or failures"])
    return tuple(line if a == NOT_MODELED else a for a in APPROXIMATIONS)


def plan_object(plan: ParallelPlan) -> dict[str, Any]:
    """The plan as ``simulate --json`` prints it: every field in declaration order (concern by
    concern, :data:`schedules.plan.CONCERNS`), the placement as text, then the number of
    micro-batches."""
    out = dataclasses.asdict(plan)
    out["placement"] = ",".join(plan.placement)
    out["num_microbatches"] = plan.num_microbatches
    return out


def resolved_config(result: SimulationResult) -> dict[str, Any]:
    """The model, plan and cluster actually simulated."""
    job = result.job
    plan = plan_object(job.plan)
    c = job.cluster
    cluster = {"name": c.name, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node, "device": c.device.name,
               "price_per_gpu_hour_usd": c.price_per_gpu_hour_usd}
    return {"job": describe_job(job), "model": dataclasses.asdict(job.model), "plan": plan, "cluster": cluster,
            "ideal_network": job.ideal_network}
