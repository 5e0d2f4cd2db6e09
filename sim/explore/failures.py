"""Failure-aware ranking for explore (``--reliability``): each row's time and cost to train with
interruptions, checkpoints and restarts counted (:mod:`sim.run`), its failure-free figures kept.

Row columns added: ``failure_free_days``, ``failure_free_cost_usd``, ``ettr``, ``interruptions``,
``checkpoint_interval_s``, ``days_p10``, ``days_p90``; ``time_to_train_days`` and ``cost_usd``
become the expected days and dollars with failures, so ranking and the Pareto front count them.
At scale doubling the GPUs no longer halves the days (the interruption rate doubles too), and a
plan with a cheaper checkpoint can overtake one with a faster step.
"""

from __future__ import annotations

from typing import Any

from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.explore.designs import sized_cluster
from sim.explore.spec import SweepSpec
from sim.job import Job
from sim.run.inputs import ReliabilityInputs
from sim.run.plan_run import build_run_model
from sim.run.predict import run_samples
from sim.summary import round_sig

DAY = 86400.0
GIB = 1024**3
EXPLORE_SAMPLES = 300  # Monte Carlo runs per plan (P10/P90 per row; the closed form ranks)
PLAN_FIELDS = ("tp", "cp", "pp", "dp", "ep", "vpp", "schedule", "microbatch_size", "zero", "sequence_parallel",
               "recompute", "dtype")


def _job(row: dict[str, Any], spec: SweepSpec, model: ModelSpec) -> Job:
    cluster = sized_cluster(row["design"], row["gpus"], spec.price_of(row["design"]))
    fields = {k: row[k] for k in PLAN_FIELDS}
    batch = row["num_microbatches"] * row["dp"] * row["microbatch_size"]
    plan = ParallelPlan(global_batch=batch, uneven_stages=model.num_layers % (row["pp"] * row["vpp"]) != 0, **fields)
    return Job(model=model, plan=plan, cluster=cluster)


def with_failures(rows: list[dict[str, Any]], spec: SweepSpec, model: ModelSpec,
                  inputs: ReliabilityInputs) -> list[dict[str, Any]]:
    """``rows`` with failures counted (module docstring)."""
    return [_row(r, spec, model, inputs) for r in rows]


def _row(row: dict[str, Any], spec: SweepSpec, model: ModelSpec, inputs: ReliabilityInputs) -> dict[str, Any]:
    job = _job(row, spec, model)
    rank_bytes = (row["memory_params_gib"] + row["memory_optimizer_gib"]) * GIB
    run = build_run_model(job, inputs, step_s=row["step_time_s"], rank_bytes=rank_bytes, tokens=spec.tokens)
    mc = run_samples(run, inputs, min(inputs.samples, EXPLORE_SAMPLES))
    p10, _, p90 = mc.percentiles_s()
    wall = run.expected_wall_s
    gpus = row["gpus"] + inputs.spare_nodes * job.cluster.gpus_per_node
    cost = wall / 3600 * gpus * row["price_per_gpu_hour_usd"]
    extra = {"failure_free_days": row["time_to_train_days"], "failure_free_cost_usd": row["cost_usd"],
             "time_to_train_days": wall / DAY, "cost_usd": cost, "usd_per_million_tokens": cost / spec.tokens * 1e6,
             "ettr": run.breakdown.productive, "interruptions": run.expected_interruptions,
             "checkpoint_interval_s": run.interval_s, "days_p10": p10 / DAY, "days_p90": p90 / DAY}
    return {**row, **{k: round_sig(v) for k, v in extra.items()}}


def failure_spec_note(inputs: ReliabilityInputs) -> str:
    """One line naming the reliability inputs the ranking used."""
    spares = f", {inputs.spare_nodes} spare nodes" if inputs.spare_nodes else ""
    return (f"failures counted: {inputs.name} ({inputs.source}; rates count {inputs.scope.value} causes){spares}, "
            f"{inputs.checkpoint.mode.value} checkpoints")


__all__ = ["failure_spec_note", "with_failures"]
