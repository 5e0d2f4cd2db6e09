"""The ``run`` object of ``simulate --json``: days, dollars and energy to train N tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sim.run.energy import PowerWave, step_energy_j, step_wave
from sim.run.inputs import ReliabilityInputs
from sim.run.interval import availability_optimal_s, daly_s, young_s
from sim.run.montecarlo import MAX_DRAWN_INTERRUPTIONS, RunSamples, simulate_runs
from sim.run.plan_run import RunModel, build_run_model
from sim.run.power import PowerProfile, power_profile
from sim.run.slow_ranks import add_slow_events, simulated_slow_steps
from sim.run.snapshot import SnapshotTiming, snapshot_timing
from sim.simulate import SimulationResult
from sim.summary import round_sig

DAY_S, HOUR_S, J_PER_MWH = 86400.0, 3600.0, 3.6e9
GIB, TB = 1024**3, 1e12


@dataclass(frozen=True)
class RunPrediction:
    """Everything the ``run`` object and the report section show."""

    model: RunModel
    inputs: ReliabilityInputs
    samples: RunSamples
    wave: PowerWave | None
    profile: PowerProfile | None
    gpus_per_node: int
    json: dict[str, Any]
    snapshot: SnapshotTiming | None = None


def rank_state_bytes(result: SimulationResult) -> float:
    """Largest parameters + optimizer states one simulated rank holds in HBM (the memory model's)."""
    return max(m.params + m.optimizer for m in result.memory.values())


def predict_run(result: SimulationResult, inputs: ReliabilityInputs, tokens: float) -> RunPrediction:
    """Run-level prediction for ``result``'s job training ``tokens`` tokens under ``inputs``."""
    job = result.job
    rank_bytes = {r: m.params + m.optimizer for r, m in result.memory.items()}
    snapshot = snapshot_timing(job, rank_bytes, rank_state_bytes(result), keep_timeline=True)
    model = build_run_model(job, inputs, step_s=result.metrics.step_time_s, rank_bytes=rank_state_bytes(result),
                            tokens=tokens, slowed_step_s=simulated_slow_steps(job, inputs), snapshot=snapshot)
    samples = run_samples(model, inputs, inputs.samples)
    profile = power_profile(job.cluster.device.name)
    wave = step_wave(result.timeline, profile) if profile is not None else None
    out = run_json(tokens=tokens, job_gpus=job.plan.world_size, gpus_per_node=job.cluster.gpus_per_node,
                   price=job.cluster.price_per_gpu_hour_usd, model=model, inputs=inputs, samples=samples)
    if wave is not None and profile is not None:
        out.update(energy_json(model, inputs, wave, profile, job.plan.world_size, job.cluster.gpus_per_node,
                               out["gpu_hours"]))
        out["cost_usd"] = round_sig(out["cost_usd"] + out["energy_mwh"] * 1000 * inputs.price_per_kwh_usd)
    return RunPrediction(model=model, inputs=inputs, samples=samples, wave=wave, profile=profile,
                         gpus_per_node=job.cluster.gpus_per_node, json=out, snapshot=snapshot)


def run_samples(model: RunModel, inputs: ReliabilityInputs, samples: int) -> RunSamples:
    """``samples`` seeded Monte Carlo runs of ``model``: failures, then slowing events; a draw
    beyond :data:`sim.run.montecarlo.MAX_DRAWN_INTERRUPTIONS` is a one-line ValueError."""
    expected = model.expected_interruptions
    if expected * samples > MAX_DRAWN_INTERRUPTIONS:
        raise ValueError(f"reliability.samples={samples} is invalid: the Monte Carlo would draw about "
                         f"{expected * samples:.3g} interruptions ({samples} runs x {expected:.3g} each), more than "
                         f"{MAX_DRAWN_INTERRUPTIONS:.0e}: lower the samples or the failure rates")
    runs = simulate_runs(work_s=model.work_s, interval_s=model.interval_s, blocking_s=model.checkpoint.blocking_s,
                         rate_s=model.rate_s, draws=model.draws, samples=samples, seed=inputs.seed,
                         weibull_shape=inputs.weibull_shape)
    return add_slow_events(runs, model.slow, inputs.seed)


def run_json(*, tokens: float, job_gpus: int, gpus_per_node: int, price: float, model: RunModel, inputs: ReliabilityInputs,
             samples: RunSamples) -> dict[str, Any]:
    """The reliability and time part of the ``run`` object (stable keys, rounded)."""
    b, c, wall = model.breakdown, model.checkpoint, model.expected_wall_s
    mtti = math.inf if model.rate_s <= 0 else 1.0 / model.rate_s
    gpus = job_gpus + inputs.spare_nodes * gpus_per_node
    p10, p50, p90 = samples.percentiles_s()
    gpu_hours = wall * gpus / HOUR_S
    return {
        "reliability": inputs.name, "source": inputs.source, "rates_count": inputs.scope.value,
        "tokens": tokens, "steps": model.steps, "step_time_s": round_sig(model.step_s),
        "ettr": round_sig(b.productive), "breakdown": {k: round_sig(v) for k, v in b.shares().items()},
        "interruptions": round_sig(model.expected_interruptions),
        "mtti_h": round_sig(mtti / HOUR_S) if math.isfinite(mtti) else None,
        "checkpoint_interval_s": round_sig(model.interval_s), "checkpoint_mode": inputs.checkpoint.mode.value,
        "optimal_interval_s": _intervals(model, mtti),
        "checkpoint": {"rank_gib": round_sig(c.rank_bytes / GIB), "total_tb": round_sig(c.total_bytes / TB),
                       "d2h_s": round_sig(c.d2h_s), "d2h_blocking_s": round_sig(c.d2h_blocking_s),
                       "d2h_formula_s": round_sig(c.d2h_formula_s), "write_s": round_sig(c.write_s), "read_s": round_sig(c.read_s),
                       "blocking_s": round_sig(c.blocking_s), "persist_s": round_sig(c.persist_s)},
        "per_interruption_s": {"restart": round_sig(model.costs.restart_s),
                               "repair_wait": round_sig(model.costs.repair_wait_s),
                               "extra_lost_work": round_sig(model.costs.extra_loss_s)},
        "slow_ranks": _slow_json(model, wall),
        "spare_nodes": inputs.spare_nodes,
        "days_failure_free": round_sig(model.work_s / DAY_S), "days_expected": round_sig(wall / DAY_S),
        "days_p10": round_sig(p10 / DAY_S), "days_p50": round_sig(p50 / DAY_S), "days_p90": round_sig(p90 / DAY_S),
        "monte_carlo": {"samples": inputs.samples, "seed": inputs.seed, "weibull_shape": inputs.weibull_shape,
                        "days_mean": round_sig(float(samples.wall_s.mean()) / DAY_S),
                        "interruptions_mean": round_sig(float(samples.failures.mean()))},
        "gpu_hours": round_sig(gpu_hours), "cost_usd": round_sig(gpu_hours * price),
    }


def _slow_json(model: RunModel, wall: float) -> dict[str, Any]:
    slow = model.slow
    return {"events": round_sig(slow.rate_s * wall), "per_event_s": round_sig(slow.cost_s),
            "slowed_training_s": round_sig(slow.slowed_s),
            "slowed_step_s": {f"{k:g}": round_sig(v) for k, v in sorted(slow.slowed_step_s.items())}}


def _intervals(model: RunModel, mtti: float) -> dict[str, float | None]:
    if not math.isfinite(mtti):
        return {"young": None, "daly": None, "availability": None}
    delta = model.checkpoint.blocking_s
    return {"young": round_sig(young_s(delta, mtti)), "daly": round_sig(daly_s(delta, mtti)),
            "availability": round_sig(availability_optimal_s(delta, mtti, model.costs.total_s))}


def energy_json(model: RunModel, inputs: ReliabilityInputs, wave: PowerWave, profile: PowerProfile, world: int,
                gpus_per_node: int, gpu_hours: float) -> dict[str, Any]:
    """Energy of the run: training (and redone work, and training at a degraded rank's pace) at
    the step's mean power, checkpoints at the copy engines' (communication) power, restarts (the
    swaps of slowed ranks too) and repair waits idle; spares idle."""
    nodes = world / gpus_per_node
    train_w = step_energy_j(wave, profile, step_s=1.0, world=world, gpus_per_node=gpus_per_node, pue=inputs.pue)
    base = nodes * profile.node_baseline_w
    idle_w = inputs.pue * (world * profile.idle_w + base)
    ckpt_w = inputs.pue * (world * profile.comm_w + base)
    b, wall = model.breakdown, model.expected_wall_s
    slowed = b.slow_rank * model.slow.slowed_s / model.slow.cost_s if model.slow.cost_s > 0 else 0.0
    busy, idle = b.productive + b.lost_work + slowed, b.restart + b.repair_wait + (b.slow_rank - slowed)
    joules = wall * (busy * train_w + b.checkpoint * ckpt_w + idle * idle_w)
    joules += wall * inputs.pue * inputs.spare_nodes * (gpus_per_node * profile.idle_w + profile.node_baseline_w)
    gpus_j = wall * world * (busy * wave.mean_gpu_w() + b.checkpoint * profile.comm_w + idle * profile.idle_w)
    node_w = wave.node_w(profile, gpus_per_node)
    return {"energy_mwh": round_sig(joules / J_PER_MWH), "energy_gpus_mwh": round_sig(gpus_j / J_PER_MWH),
            "energy_tdp_bound_mwh": round_sig(gpu_hours * profile.tdp_w / 1e6),
            "kwh_per_step": round_sig(train_w * model.step_s / 3.6e6),
            "power": {"cluster_mean_mw": round_sig(train_w / 1e6), "cluster_idle_mw": round_sig(idle_w / 1e6),
                      "swing_mw": round_sig((train_w - idle_w) / 1e6),
                      "node_peak_kw": round_sig(float(node_w.max()) / 1e3),
                      "node_mean_kw": round_sig((gpus_per_node * wave.mean_gpu_w() + profile.node_baseline_w) / 1e3),
                      "pue": inputs.pue, "profile": profile.device}}
