"""Per-op overheads fitted from recorded runs: the labelled compute spans of their Timelines.

For each run the simulator runs the same configuration with every fitted overhead at 0; per
(rank, step) it gives the compute work ``W`` and the number of compute ops ``n`` (the
optimizer's separately). The measured Timeline gives, inside each rank's step window, the busy
time of its compute stream (optimizer and the rest) and its idle time (the bubble's
definition). Each overhead is then a least-squares fit of measured = base + n x overhead, in order:

- ``kernel_overhead_s`` from the non-optimizer busy time of runs without TP or DP (unless the
  op-class fit of the one-rank runs gave it, :mod:`profiler.calibrate.op_class_fit`),
- ``optimizer_overhead_s`` from their optimizer busy time (base: W + n x kernel overhead),
- ``host_overhead_s``, ``action_overhead_s`` and ``step_overhead_s`` from their idle time:
  idle = step setup + actions x action overhead + compute ops x host time (least squares over
  runs with different numbers of ops and actions per step),
- ``tp_overhead_s`` / ``tp_host_overhead_s`` from the busy / idle time of TP runs,
- ``tp_comm_overhead_s`` from their exposed communication (n: TP collectives per step),
- ``dtensor_optimizer_overhead_s`` from the optimizer busy time of runs with TP or DP,
where TP and DP runs are those with no more ranks than the host's cores; runs with more
(oversubscribed) only fit ``host.sched_delay_s`` (:func:`fit_sched_delay`), afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.vocab import Lane
from profiler.calibrate.fitting import Fit, fit_nonnegative, fit_scale, round_sig
from profiler.validate.compare import run_speed
from profiler.validate.job import job_for_run
from profiler.validate.measured import load_measured, with_rank_windows
from schedules.pipeline import build_schedule
from sim import intervals
from sim.job import Job
from sim.metrics import rank_step_table, rank_windows
from sim.simulate import simulate
from sim.timeline import Timeline
from topo.hardware_profile import FitInfo, HardwareProfile

OVERHEADS = ("kernel_overhead_s", "optimizer_overhead_s", "host_overhead_s", "step_overhead_s", "action_overhead_s",
             "tp_overhead_s", "tp_host_overhead_s", "tp_comm_overhead_s", "dtensor_optimizer_overhead_s")


@dataclass(frozen=True)
class RunSamples:
    """Per (rank, step) measured and zero-overhead simulated figures of one run."""

    name: str
    tp: int
    dtensor: bool  # parameters are distributed tensors (TP, or the trainer's DP wrappers)
    plain: bool  # no TP and no DP: one process, nothing distributed
    oversubscribed: bool  # more ranks than the host's cores (fits sched_delay_s only)
    table: pd.DataFrame  # busy_s, opt_s, idle_s (measured); w_busy_s, w_opt_s, w_idle_s, n_ops, n_opt (sim)


def compute_busy(tl: Timeline) -> pd.DataFrame:
    """Per (rank, step): seconds the compute stream is busy inside the rank's window, for the
    optimizer and for everything else."""
    windows = rank_windows(tl)
    rows = []
    df = tl.spans[tl.spans["lane"].astype(str) == "compute"]
    for (rank, step), part in df.groupby(["rank", "step"], sort=True, observed=True):
        if (int(rank), int(step)) not in windows:
            continue
        lo, hi = windows[(int(rank), int(step))]
        opt = part["kind"].astype(str).to_numpy() == "optimizer"
        s, e = part["start_s"].to_numpy(), part["end_s"].to_numpy()
        busy = [intervals.total_length(*intervals.clip(s[m], e[m], lo, hi)) for m in (~opt, opt)]
        rows.append({"rank": int(rank), "step": int(step), "busy_s": busy[0], "opt_s": busy[1],
                     "n_ops": int((~opt).sum()), "n_opt": int(opt.sum())})
    return pd.DataFrame(rows)


def tp_collectives(tl: Timeline) -> pd.DataFrame:
    """Per rank: tensor-parallel collective spans per step (a simulated Timeline: one per op)."""
    df = tl.spans[tl.spans["lane"].astype(str) == Lane.TP]
    counts = df.groupby("rank", observed=True).size() / max(1, len(tl.steps))
    return pd.DataFrame({"rank": [int(r) for r in counts.index], "n_tp": counts.to_numpy()})


def _zeroed(profile: HardwareProfile | None) -> HardwareProfile:
    base = profile or HardwareProfile()
    device = {**base.device, **{k: 0.0 for k in OVERHEADS}}
    return dataclasses.replace(base, device=device)


def run_samples(path: str | Path, profile: HardwareProfile | None) -> RunSamples:
    """Measured (every recording's steps) and zero-overhead simulated figures of the run at ``path``."""
    measured = load_measured(path)
    speed = run_speed(path, profile)
    job = job_for_run(measured.manifest, profile=_zeroed(profile), speed=speed)
    sim = simulate(job).timeline
    meas = pd.concat([compute_busy(tl).merge(rank_step_table(tl)[["rank", "step", "idle_s", "exposed_comm_s"]],
                                             on=["rank", "step"])
                      for tl in (r.timeline for r in measured.recordings)], ignore_index=True)
    simt = compute_busy(sim).merge(rank_step_table(sim)[["rank", "idle_s", "exposed_comm_s"]], on="rank")
    simt = simt.rename(columns={"busy_s": "w_busy_s", "opt_s": "w_opt_s", "idle_s": "w_idle_s",
                                "exposed_comm_s": "w_exposed_s"})
    simt = simt.merge(tp_collectives(sim), on="rank", how="left").fillna({"n_tp": 0.0})
    table = meas.drop(columns=["n_ops", "n_opt"]).merge(simt.drop(columns="step"), on="rank")
    table["n_actions"] = _actions_per_step(job)
    table["speed"] = speed
    counts = ["n_ops", "n_opt", "n_tp", "n_actions"]
    table[counts] = table[counts] / speed  # overheads fitted at the reference speed
    plan, host = job.plan, job.cluster.host
    oversubscribed = job.cluster.gpus_per_node > host.cpu_cores  # more processes than cores
    return RunSamples(name=Path(path).name, tp=plan.tp, dtensor=plan.tp > 1 or plan.dp > 1,
                      plain=plan.tp == 1 and plan.dp == 1 and plan.pp == 1, oversubscribed=oversubscribed,
                      table=table)


def _actions_per_step(job: Job) -> float:
    """Pipeline actions per step of one rank (the ranks of a plan do as many)."""
    plan = job.plan
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return float(len(schedule.orders[0]))


def _stack(runs: Iterable[RunSamples]) -> pd.DataFrame:
    frames = [r.table for r in runs]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fit_overheads(runs: list[RunSamples], kernel_overhead_s: float | None = None
                  ) -> tuple[dict[str, float], dict[str, FitInfo]]:
    """The overhead fields (see the module docstring) and their fit records; a given
    ``kernel_overhead_s`` is used as it is (and not returned)."""
    out: dict[str, float] = {}
    fits: dict[str, FitInfo] = {}

    def record(field: str, fit: Fit, source: str) -> float:
        out[field] = round_sig(fit.params[0])
        fits[f"device.{field}"] = FitInfo(samples=fit.samples, rel_error=fit.rel_error, source=source)
        return out[field]

    plain = _stack(r for r in runs if r.plain)
    if not plain.empty:
        k = kernel_overhead_s if kernel_overhead_s is not None else record(
            "kernel_overhead_s", fit_scale(plain.n_ops, plain.busy_s, plain.w_busy_s),
            "runs without TP/DP: compute busy time per step vs ops")
        o = record("optimizer_overhead_s", fit_scale(plain.n_opt, plain.opt_s, plain.w_opt_s + plain.n_opt * k),
                   "runs without TP/DP: optimizer busy time per step vs optimizer ops")
        columns = {"step_overhead_s": np.ones(len(plain)) / plain.speed.to_numpy(),
                   "action_overhead_s": plain.n_actions.to_numpy(),
                   "host_overhead_s": (plain.n_ops + plain.n_opt).to_numpy()}
        coefs, idle_err = fit_nonnegative(columns, (plain.idle_s - plain.w_idle_s).to_numpy())
        for field, value in coefs.items():
            out[field] = round_sig(value)
            fits[f"device.{field}"] = FitInfo(samples=len(plain), rel_error=idle_err,
                                              source="runs without TP/DP: idle per step = setup + actions x "
                                                     "action overhead + compute ops x host time")
        h, step_s = out["host_overhead_s"], out["step_overhead_s"]
        action_s = out["action_overhead_s"]
        tp = _stack(r for r in runs if r.tp > 1 and not r.oversubscribed)
        if not tp.empty:
            record("tp_overhead_s", fit_scale(tp.n_ops, tp.busy_s, tp.w_busy_s + tp.n_ops * k),
                   "TP runs: compute busy time per step vs ops")
            n_all = tp.n_ops + tp.n_opt
            base = tp.w_idle_s + n_all * h + step_s / tp.speed + tp.n_actions * action_s
            record("tp_host_overhead_s", fit_scale(n_all, tp.idle_s, base),
                   "TP runs: idle time per step vs compute ops")
            record("tp_comm_overhead_s", fit_scale(tp.n_tp, tp.exposed_comm_s, tp.w_exposed_s),
                   "TP runs: exposed communication per step vs TP collectives")
        dt = _stack(r for r in runs if r.dtensor and not r.oversubscribed)
        if not dt.empty:
            record("dtensor_optimizer_overhead_s",
                   fit_scale(dt.n_opt, dt.opt_s, dt.w_opt_s + dt.n_opt * (k + o)),
                   "TP/DP runs: optimizer busy time per step vs optimizer ops")
    return out, fits


def describe(runs: list[RunSamples]) -> list[dict[str, Any]]:
    """One line per run: what it contributed."""
    return [{"run": r.name, "samples": len(r.table), "tp": r.tp, "plain": r.plain, "dtensor": r.dtensor,
             "oversubscribed": r.oversubscribed} for r in runs]


def fit_sched_delay(paths: list[str], profile: HardwareProfile) -> tuple[dict[str, float], dict[str, FitInfo]]:
    """``host.sched_delay_s`` from the runs with more ranks than the host's cores:
    their exposed communication per step = simulated (with ``profile``, no delay) + comm calls x
    oversubscription x delay. Empty when no run is oversubscribed."""
    rows = []
    for path in sorted(paths):
        measured = load_measured(path)
        job = job_for_run(measured.manifest, profile=profile, speed=run_speed(path, profile), steps=3)
        host = job.cluster.host
        oversub = job.cluster.gpus_per_node / host.cpu_cores - 1.0
        if oversub <= 0:
            continue
        sim = with_rank_windows(simulate(job).timeline, skip_steps=1)
        calls = _comm_calls(sim)
        pooled = pd.concat([rank_step_table(r.timeline) for r in measured.recordings], ignore_index=True)
        meas = pooled.groupby("rank")["exposed_comm_s"].median()
        simulated = rank_step_table(sim).groupby("rank")["exposed_comm_s"].median()
        rows += [(calls[r] * oversub / run_speed(path, profile), float(meas[r]), float(simulated[r]))
                 for r in meas.index if r in calls]
    if not rows:
        return {}, {}
    fit = fit_scale([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    info = FitInfo(samples=fit.samples, rel_error=fit.rel_error,
                   source="oversubscribed runs: exposed communication per step vs calls x oversubscription")
    return {"sched_delay_s": round_sig(fit.params[0])}, {"host.sched_delay_s": info}


def _comm_calls(tl: Timeline) -> dict[int, float]:
    """Per rank: communication calls per step in a simulated Timeline (steps >= 1)."""
    df = tl.spans[(tl.spans["step"] >= 1) & tl.spans["lane"].astype(str).str.startswith("comm")]
    steps = max(1, len([s for s in tl.steps if s >= 1]))
    return {int(r): n / steps for r, n in df.groupby("rank", observed=True).size().items()}
