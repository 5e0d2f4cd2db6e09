"""Compare a simulated step with a recorded run: the figures, their errors, and the targets.

Targets (per configuration, from issue 4): step time within 10% (relative), bubble fraction
within 3 percentage points, exposed communication within 5 points (absolute). Per-stage busy
time (compute per step of each pipeline rank) and the per-(lane, kind) seconds are reported to
show where the model differs, without a target.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.run_manifest import require_manifest
from profiler.validate.job import job_for_run
from profiler.validate.measured import (
    MeasuredRun,
    StepFigures,
    lane_kind_seconds,
    load_measured,
    step_figures,
    with_rank_windows,
)
from profiler.validate.record import recorded_reference_s
from sim.simulate import SimulationResult, simulate
from sim.summary import round_sig
from topo import ClusterSpec
from topo.hardware_profile import HardwareProfile

SIM_STEPS = 3  # simulated steps; the first is left out (no previous step to overlap with)
TARGETS = {"step_time_s": ("relative", 0.10), "bubble_fraction": ("absolute", 0.03),
           "exposed_comm_fraction": ("absolute", 0.05)}


@dataclass(frozen=True)
class MetricRow:
    """One compared figure: measured, simulated, error and whether it meets its target."""

    metric: str
    measured: float
    simulated: float
    error: float  # relative (step and busy times) or absolute (fractions)
    kind: str  # "relative" | "absolute"
    target: float | None  # None: reported only
    ok: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, rounded to 4 significant digits."""
        return {"metric": self.metric, "measured": round_sig(self.measured),
                "simulated": round_sig(self.simulated), "error": round_sig(self.error),
                "error_kind": self.kind, "target": self.target, "ok": self.ok}


@dataclass(frozen=True)
class Comparison:
    """Everything ``trainsim validate`` shows for one run."""

    run: str
    config: dict[str, Any]
    rows: list[MetricRow]
    measured: MeasuredRun
    simulation: SimulationResult
    breakdown: pd.DataFrame = field(repr=False)  # lane, kind, measured_s, simulated_s per step and rank
    speed: float = 1.0  # machine speed during the run relative to the profile's calibration

    @property
    def ok(self) -> bool:
        """Every targeted figure within its target."""
        return all(r.ok for r in self.rows)

    def row(self, metric: str) -> MetricRow:
        """The row of ``metric``."""
        return next(r for r in self.rows if r.metric == metric)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (stable keys)."""
        return {"run": self.run, "config": self.config, "ok": self.ok, "speed": round_sig(self.speed),
                "metrics": [r.as_dict() for r in self.rows],
                "breakdown": [{"lane": r.lane, "kind": r.kind, "measured_s": round_sig(r.measured_s),
                               "simulated_s": round_sig(r.simulated_s)}
                              for r in self.breakdown.itertuples()]}


def compare_figures(measured: StepFigures, simulated: StepFigures) -> list[MetricRow]:
    """The compared rows (targeted figures first, then per-stage busy times)."""
    rows = []
    for metric, (kind, target) in TARGETS.items():
        m, s = getattr(measured, metric), getattr(simulated, metric)
        err = (s - m) / m if kind == "relative" else s - m
        rows.append(MetricRow(metric, m, s, err, kind, target, abs(err) <= target + 1e-12))
    for stage in sorted(measured.stage_busy_s):
        m, s = measured.stage_busy_s[stage], simulated.stage_busy_s.get(stage, 0.0)
        rows.append(MetricRow(f"stage{stage}_busy_s", m, s, (s - m) / m if m else 0.0, "relative", None, True))
    return rows


def short_config(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration keys a table shows."""
    keys = ("tp", "pp", "dp", "schedule", "vpp", "zero", "global_batch", "microbatch_size")
    out = {k: config.get(k) for k in keys}
    out["model"] = (config.get("model") or {}).get("name")
    return out


def reference_steps(profile: HardwareProfile | None) -> dict[str, float]:
    """Model -> median step time of its one-rank reference run at calibration (profile meta)."""
    text = (profile.meta if profile is not None else {}).get("reference_step_s")
    return {str(k): float(v) for k, v in json.loads(text).items()} if text else {}


def run_speed(path: str | Path, profile: HardwareProfile | None) -> float:
    """How much faster the machine ran during the recording at ``path`` than at the profile's
    calibration: the one-rank reference run of the same model, timed right before the recording
    (the median over the run's recordings), against the same run at calibration (1.0 if either
    is missing, or without a profile: a preset describes no particular machine state)."""
    if profile is None:
        return 1.0
    manifest = require_manifest(path)
    model = (manifest.get("config") or {}).get("model", {}).get("name")
    at_calibration = reference_steps(profile).get(str(model))
    now = recorded_reference_s(path)
    return at_calibration / now if at_calibration and now else 1.0


def validate_run(path: str | Path, *, profile: HardwareProfile | None = None,
                 cluster: ClusterSpec | None = None, speed: float | None = None) -> Comparison:
    """Simulate the configuration of the run at ``path`` and compare it with the recording
    (``speed``: override the probes' speed ratio; 1.0 disables the correction)."""
    measured = load_measured(path)
    speed = run_speed(path, profile) if speed is None else speed
    job = job_for_run(measured.manifest, profile=profile, cluster=cluster, speed=speed, steps=SIM_STEPS)
    result = simulate(job)
    simulated = with_rank_windows(result.timeline, skip_steps=1)
    recorded = step_figures(*(r.timeline for r in measured.recordings))
    rows = compare_figures(recorded, step_figures(simulated))
    breakdown = lane_kind_seconds(measured.timeline).merge(
        lane_kind_seconds(simulated.select(simulated.spans["step"] >= 1)), on=["lane", "kind"], how="outer",
        suffixes=("_m", "_s")).fillna(0.0)
    breakdown = breakdown.rename(columns={"seconds_m": "measured_s", "seconds_s": "simulated_s"})
    result = result.with_timeline(simulated)
    return Comparison(run=str(path), config=short_config(measured.manifest.get("config", {})),
                      rows=rows, measured=measured, simulation=result, breakdown=breakdown, speed=speed)
