"""One result row per evaluated plan: the plan, its step, and time and cost to train the tokens.

    tokens/s        = global batch x sequence length / step time
    time to train   = tokens / (tokens/s)                  (no rounding to whole steps)
    MFU             = model FLOPs per step / (step time x GPUs x dense peak)   (as :mod:`sim.summary`)
    cost            = time to train (h) x GPUs x price per GPU-hour
    step band       = the measured step's 80% interval from comparable published runs
                      (:mod:`sim.accuracy`): step_low_s .. step_high_s
    USD per M tokens = cost / tokens x 1e6

Numbers are rounded to 9 significant digits (:func:`sim.summary.round_sig`), so rows are
byte-identical however the sweep was split across processes or resumed.
"""

from __future__ import annotations

from typing import Any

from core.settings import is_int, is_real
from schedules.layer_kinds import model_flops_per_step
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.accuracy.job_class import plan_class
from sim.accuracy.summary import class_band
from sim.explore.enumerate import Candidate
from sim.explore.fast_eval import FastStep
from sim.memory import GIB
from sim.summary import HBM_RESERVE_FRACTION, round_sig
from topo import ClusterSpec

PLAN_COLUMNS = ("id", "design", "gpus", "nodes", "device", "tp", "cp", "pp", "dp", "ep", "vpp", "schedule",
                "microbatch_size", "num_microbatches", "zero", "sequence_parallel", "recompute", "dtype")
METRIC_COLUMNS = ("step_time_s", "step_low_s", "step_high_s", "band_comparable", "tokens_per_s", "tflops_per_gpu", "mfu", "time_to_train_days", "cost_usd",
                  "usd_per_million_tokens", "price_per_gpu_hour_usd", "bubble_fraction",
                  "exposed_comm_fraction", "compute_fraction", "layer_comm_fraction",
                  "transfer_comm_fraction", "idle_fraction", "contention", "peak_memory_gib", "usable_hbm_gib",
                  "memory_params_gib", "memory_grads_gib", "memory_optimizer_gib",
                  "memory_activations_gib", "memory_buffers_gib")
COLUMNS = PLAN_COLUMNS + METRIC_COLUMNS
TEXT_COLUMNS = ("id", "design", "device", "schedule", "recompute", "dtype")
FLAG_COLUMNS = ("sequence_parallel", "band_comparable", "contention")
OPTIONAL_COLUMNS = ("step_low_s", "step_high_s")  # None without a comparable published run


def well_formed(row: Any) -> bool:
    """Whether ``row`` (read back from a sweep's results.jsonl) holds every column with the type
    :func:`result_row` writes: texts, flags, integers >= 0 for the plan's counts, finite numbers
    (or None for the band's ends) for the metrics. A row that does not is recomputed on resume."""
    if not isinstance(row, dict) or any(c not in row for c in COLUMNS):
        return False
    for c in COLUMNS:
        v = row[c]
        if c in TEXT_COLUMNS:
            ok = isinstance(v, str)
        elif c in FLAG_COLUMNS:
            ok = isinstance(v, bool)
        elif c in PLAN_COLUMNS:
            ok = is_int(v) and v >= 0
        elif v is None:
            ok = c in OPTIONAL_COLUMNS
        else:
            ok = is_real(v)
        if not ok:
            return False
    return True


def _band(model: ModelSpec, plan: ParallelPlan, cluster: ClusterSpec, step_s: float) -> dict[str, Any]:
    """The measured step's 80% band (:mod:`sim.accuracy.band`): its ends in seconds and whether it
    rests on comparable published runs (None and False without one)."""
    band = class_band(plan_class(model, plan, cluster.device))
    if band is None:
        return {"step_low_s": None, "step_high_s": None, "band_comparable": False}
    return {"step_low_s": band.low * step_s, "step_high_s": band.high * step_s, "band_comparable": band.comparable}


def result_row(c: Candidate, cluster: ClusterSpec, model: ModelSpec, tokens: float, step: FastStep) -> dict[str, Any]:
    """The row of one evaluated plan (keys :data:`COLUMNS`)."""
    p = c.plan
    t = step.step_time_s
    tokens_per_s = p.global_batch * model.seq_len / t
    flops = model_flops_per_step(model, p.global_batch)
    time_s = tokens / tokens_per_s
    price = cluster.price_per_gpu_hour_usd
    cost = time_s / 3600 * p.world_size * price
    mem = c.memory.peak
    row: dict[str, Any] = {
        "id": c.plan_id, "design": c.design, "gpus": p.world_size, "nodes": cluster.nodes,
        "device": cluster.device.name, "tp": p.tp, "cp": p.cp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "vpp": p.vpp,
        "schedule": p.schedule, "microbatch_size": p.microbatch_size, "num_microbatches": p.num_microbatches,
        "zero": p.zero, "sequence_parallel": p.sequence_parallel, "recompute": p.recompute, "dtype": p.dtype,
        "step_time_s": t, **_band(model, p, cluster, t), "tokens_per_s": tokens_per_s, "tflops_per_gpu": flops / t / p.world_size / 1e12,
        "mfu": flops / (t * p.world_size * cluster.device.peak_flops(p.compute_dtype)),
        "time_to_train_days": time_s / 86400, "cost_usd": cost, "usd_per_million_tokens": cost / tokens * 1e6,
        "price_per_gpu_hour_usd": price, "bubble_fraction": step.bubble_fraction,
        "exposed_comm_fraction": step.exposed_comm_fraction, "compute_fraction": step.compute_fraction,
        "layer_comm_fraction": step.layer_comm_fraction, "transfer_comm_fraction": step.transfer_comm_fraction,
        "idle_fraction": step.idle_fraction, "contention": step.contention, "peak_memory_gib": mem.total / GIB,
        "usable_hbm_gib": cluster.device.hbm_bytes * (1 - HBM_RESERVE_FRACTION) / GIB,
        **{f"memory_{k}_gib": v for k, v in mem.gib().items()},
    }
    return {k: round_sig(v) if isinstance(v, float) else v for k, v in row.items()}
