"""The validation suite and the calibration runs: which trainer configurations, recorded where.

The suite covers world sizes 2, 4 and 8; TP only; PP with GPipe, 1F1B and interleaved 1F1B; DP
with ZeRO 0/1/2/3; two full 3D combinations; two model sizes ("small": 8 layers of width 256;
"small-wide": 4 layers of width 512), fp32 on CPUs with gloo. Its runs live in
``traces/suite-<name>/``. The calibration runs (``traces/calib-<name>/``) are different
configurations (one rank, or the "tiny" model, incl. one 8-rank run for oversubscription) and
are the only runs a committed profile may be fitted on: the suite is held out.

The MoE suite (:data:`MOE_SUITE`, ``trainsim validate --suite --moe``) holds the recorded
mixture-of-experts runs, beside the dense suite so that its table and floor checks stay as they
are: the same layout (``traces/suite-<name>/`` with ``repeat-<k>/`` recordings), the same targets
and the same noise-floor rule (issue 17). Its runs are held out too.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.trainer.config import TrainConfig
from profiler.trainer.moe_config import apply_moe_flags
from schedules.model import ModelSpec
from schedules.model_presets import get_model

WARMUP_STEPS = 2
PROFILED_STEPS = 5  # the parser keeps all but the last: 4 measured steps per run


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One recorded configuration: a name (its directory) and the trainer's settings
    (``moe_experts`` > 0: the ``model`` preset's MLPs turned into MoE blocks of that many
    experts, ``moe_top_k`` per token, as ``trainsim profile --moe-experts N --moe-top-k K``)."""

    name: str
    model: str
    settings: dict[str, Any] = field(default_factory=dict)
    prefix: str = "suite"
    moe_experts: int = 0
    moe_top_k: int = 2

    @property
    def directory(self) -> str:
        """Directory under the traces root."""
        return f"{self.prefix}-{self.name}"

    def model_spec(self) -> ModelSpec:
        """The model trained: the preset, with MoE blocks if ``moe_experts`` says so."""
        spec = get_model(self.model)
        if not self.moe_experts:
            return spec
        flags = argparse.Namespace(moe_experts=self.moe_experts, moe_top_k=self.moe_top_k, moe_ffn=None,
                                   moe_shared_experts=None, moe_dense_layers=None)
        return apply_moe_flags(spec, flags)

    def config(self) -> TrainConfig:
        """The trainer configuration (CPU, fp32, fixed warm-up and profiled steps)."""
        return TrainConfig(model=self.model_spec(), device="cpu", dtype="fp32",
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

# EP2 x TP2 (+SP) x DP2 on 4 processes (expert-parallel ranks are data-parallel ranks), the
# "tiny" model with 4 SwiGLU experts top-2 in every layer, ZeRO-0, one micro-batch per DP rank:
# the configuration of the first MoE recording (traces/ep2tp2dp2-moe), recorded three times.
# Beside it its dense twin (the same plan without experts), recorded in the same sessions: the
# part of the MoE run's error that is not the MoE's (the machine's state against calibration's).
MOE_SUITE: tuple[RunSpec, ...] = (
    RunSpec(name="ep2tp2dp2-tiny-moe", model="tiny", moe_experts=4, moe_top_k=2,
            settings={"tp": 2, "dp": 2, "ep": 2, "zero": 0, "global_batch": 2}),
    RunSpec(name="tp2dp2-tiny-dense-twin", model="tiny", settings={"tp": 2, "dp": 2, "zero": 0, "global_batch": 2}),
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
