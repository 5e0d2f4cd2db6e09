"""The validation suite and the calibration runs: which trainer configurations, recorded where.

The suite covers world sizes 2, 4 and 8; TP only; PP with GPipe, 1F1B and interleaved 1F1B; DP
with ZeRO 0/1/2/3; two full 3D combinations; two model sizes ("small": 8 layers of width 256;
"small-wide": 4 layers of width 512), fp32 on CPUs with gloo. Its runs live in
``traces/suite-<name>/``. The calibration runs (``traces/calib-<name>/``) are different
configurations (one rank, or the "tiny" model, incl. one 8-rank run for oversubscription) and
are the only runs a committed profile may be fitted on: the suite is held out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.trainer.config import TrainConfig
from schedules.model import get_model

WARMUP_STEPS = 2
PROFILED_STEPS = 5  # the parser keeps all but the last: 4 measured steps per run


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One recorded configuration: a name (its directory) and the trainer's settings."""

    name: str
    model: str
    settings: dict[str, Any] = field(default_factory=dict)
    prefix: str = "suite"

    @property
    def directory(self) -> str:
        """Directory under the traces root."""
        return f"{self.prefix}-{self.name}"

    def config(self) -> TrainConfig:
        """The trainer configuration (CPU, fp32, fixed warm-up and profiled steps)."""
        return TrainConfig(model=get_model(self.model), device="cpu", dtype="fp32",
                           warmup_steps=WARMUP_STEPS, steps=PROFILED_STEPS, **self.settings)


def _run(name: str, model: str, prefix: str = "suite", **settings: Any) -> RunSpec:
    return RunSpec(name=name, model=model, settings=settings, prefix=prefix)


SUITE: tuple[RunSpec, ...] = (
    _run("tp2-small", "small", tp=2, global_batch=4),
    _run("pp2-gpipe-small", "small", pp=2, schedule="gpipe", global_batch=4),
    _run("pp4-1f1b-small", "small", pp=4, schedule="1f1b", global_batch=8),
    _run("pp2-interleaved-small", "small", pp=2, schedule="interleaved", vpp=2, global_batch=4),
    _run("dp2-zero0-wide", "small-wide", dp=2, zero=0, global_batch=4),
    _run("dp2-zero1-wide", "small-wide", dp=2, zero=1, global_batch=4),
    _run("dp4-zero2-wide", "small-wide", dp=4, zero=2, global_batch=8),
    _run("dp4-zero3-wide", "small-wide", dp=4, zero=3, global_batch=8),
    _run("tp2pp2dp2-1f1b-small", "small", tp=2, pp=2, dp=2, schedule="1f1b", zero=1, global_batch=8),
    _run("tp2pp2dp2-interleaved-wide", "small-wide", tp=2, pp=2, dp=2, schedule="interleaved", vpp=2,
         zero=0, global_batch=8),
    _run("dp2-zero3-offload-wide", "small-wide", dp=2, zero=3, offload="optimizer", global_batch=4),
)

CALIBRATION: tuple[RunSpec, ...] = (
    _run("ws1-small", "small", prefix="calib", global_batch=4),
    _run("ws1-wide", "small-wide", prefix="calib", global_batch=4),
    _run("ws1-tiny", "tiny", prefix="calib", global_batch=8),
    _run("tp2-tiny", "tiny", prefix="calib", tp=2, global_batch=4),
    _run("dp2-tiny", "tiny", prefix="calib", dp=2, zero=0, global_batch=4),
    _run("tp2dp4-tiny", "tiny", prefix="calib", tp=2, dp=4, zero=0, global_batch=8),
)


def reference_of(spec: RunSpec) -> RunSpec | None:
    """The one-rank calibration run of ``spec``'s model (its speed reference), if there is one."""
    return next((c for c in CALIBRATION if c.model == spec.model and c.name.startswith("ws1-")), None)


def find_runs(names: list[str] | None, specs: tuple[RunSpec, ...] = SUITE) -> tuple[RunSpec, ...]:
    """The specs named (all if ``names`` is empty); an unknown name is a ValueError listing them."""
    if not names:
        return specs
    by_name = {s.name: s for s in specs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"run={unknown[0]!r} is invalid: expected one of {', '.join(by_name)}")
    return tuple(by_name[n] for n in names)


def run_directory(root: str | Path, spec: RunSpec) -> Path:
    """Where ``spec`` is recorded under the traces root."""
    return Path(root) / spec.directory
