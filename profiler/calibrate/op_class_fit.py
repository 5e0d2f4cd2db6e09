"""In-training rates per op class, fitted from the one-rank calibration runs' labelled spans.

The microbenchmarks time each kernel alone and hot in cache; inside a training step the same
GEMMs find their weights evicted by everything that ran in between, and the element-wise work is
a chain of unfused eager ops (a norm is pow, mean, add, rsqrt, mul, mul, each with its own pass
and dispatch), not one streaming kernel. Measured on this host's committed runs: the linear
layers of the "small" and "small-wide" models run ~1.2-1.4x slower than the GEMM sweep predicts,
and their non-GEMM work per step is the same for both (it scales with elements, not with op
count), ~10x the streaming-add roofline.

For each one-rank run (no TP, DP or PP: one process, nothing overlaps) and class, per step:

    measured gemm        = a x simulated gemm        + k x gemm ops
    measured attention   = c x simulated attention   + k x attention ops
    measured other       = b x simulated activation  + k x activation ops
    measured AccumulateGrad = e x simulated elementwise + k x elementwise ops

where "simulated" is the profile's microbenchmark rate with no per-op overhead and ``k`` is the
per-op overhead (dispatch, and the profiler's own cost per op in a profiled run). The five
coefficients are one non-negative least-squares fit over every run's median step (relative
errors weigh runs alike). They become the device's ``gemm_curve_efficiency`` / ``gemm_efficiency``
(divided by ``a``), ``attention_efficiency`` (divided by ``c``), ``activation_efficiency``
(``1/b``), ``elementwise_efficiency`` (``1/e``) and ``kernel_overhead_s`` (``k``). Measured spans
are classed by name: matmul ops and their autograd nodes, or GEMM kernels, are GEMMs; scaled
dot-product / flash attention and softmax are attention; ``AccumulateGrad`` (adding a
micro-batch's weight gradients into the stored ones, 3 passes over the gradients) is the
simulator's "elementwise" class; the rest of the compute stream (not the optimizer) is "other"
(:func:`profiler.kineto.names.op_class`, shared with the replay's ``--scale`` knobs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.vocab import Lane, OpClass
from profiler.calibrate.fitting import fit_nonnegative, rel_error, round_sig
from profiler.kineto.names import op_class
from profiler.validate.job import job_for_run
from profiler.validate.measured import load_measured
from sim.simulate import build_and_price
from topo.hardware_profile import FitInfo, HardwareProfile

CLASSES: tuple[str, ...] = (OpClass.GEMM, OpClass.ATTENTION, OpClass.ACTIVATION, OpClass.ELEMENTWISE)  # simulator op classes (see span_class)
SOURCE = ("one-rank runs: measured {cls} time per step = factor x microbenchmark-rate time + ops x "
          "kernel overhead (non-negative least squares over the runs' median steps)")


def span_class(name: str) -> str:
    """Op class of a measured compute span by its name (:func:`profiler.kineto.names.op_class`):
    gemm, attention, elementwise (gradient accumulation, ``AccumulateGrad``: the simulator's
    bulk pass over gradients) or (the rest) activation."""
    if "AccumulateGrad" in name:
        return "elementwise"
    cls = op_class(name)
    return "activation" if cls == OpClass.ELEMENTWISE else cls


@dataclass(frozen=True)
class ClassSample:
    """One run: measured seconds per step by class (median over its steps), and the
    simulator's seconds and op counts per step by class at the microbenchmark rates."""

    run: str
    measured_s: dict[str, float]
    simulated_s: dict[str, float]
    ops: dict[str, int]


def measured_by_class(path: str | Path) -> dict[str, float]:
    """Median over the steps of every recording of the compute stream's seconds per class
    (optimizer left out)."""
    frames = []
    for index, recording in enumerate(load_measured(path).recordings):
        spans = recording.timeline.spans
        spans = spans[(spans["lane"].astype(str) == "compute") & (spans["kind"].astype(str) != "optimizer")]
        frames.append(spans.assign(seconds=spans["end_s"] - spans["start_s"], recording=index,
                                   cls=spans["name"].astype(str).map(span_class)))
    table = pd.concat(frames, ignore_index=True)
    per_step = table.groupby(["recording", "rank", "step", "cls"], observed=True)["seconds"].sum().unstack(
        fill_value=0.0)
    return {c: float(per_step[c].median()) if c in per_step else 0.0 for c in CLASSES}


def simulated_by_class(manifest: dict[str, Any], profile: HardwareProfile) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds and op counts per class of one step of rank 0's compute stream, priced with
    ``profile`` (call it with the per-op overhead at 0)."""
    job = replace(job_for_run(manifest, profile=profile, speed=1.0, steps=1), folded=False)
    _, _, graph, costs = build_and_price(job)
    seconds = dict.fromkeys(CLASSES, 0.0)
    ops = dict.fromkeys(CLASSES, 0)
    for task, cost in zip(graph.tasks, costs, strict=True):
        if task.rank != 0:
            continue
        for seg in cost.segments:
            if seg.op.lane == Lane.COMPUTE and seg.op.op_class in seconds:
                seconds[seg.op.op_class] += seg.duration_s
                ops[seg.op.op_class] += 1
    return seconds, ops


def class_sample(path: str | Path, profile: HardwareProfile) -> ClassSample:
    """The sample of the one-rank run at ``path``."""
    manifest = load_measured(path).manifest
    base = HardwareProfile(meta=profile.meta, device={**profile.device, "kernel_overhead_s": 0.0},
                           host=profile.host, collectives=profile.collectives, fits=profile.fits)
    seconds, ops = simulated_by_class(manifest, base)
    return ClassSample(Path(path).name, measured_by_class(path), seconds, ops)


def fit_class_rates(samples: list[ClassSample], device: dict[str, Any]) -> tuple[dict[str, Any], dict[str, FitInfo]]:
    """The device fields (see the module docstring) from the one-rank runs' samples, applied to
    ``device`` (the microbenchmark's fields), and their fit records; ``{}`` without samples."""
    rows = [(s, c) for s in samples for c in CLASSES if s.measured_s.get(c, 0) > 0 and s.simulated_s.get(c, 0) > 0]
    if not rows:
        return {}, {}
    y = np.array([s.measured_s[c] for s, c in rows])
    columns = {c: np.array([s.simulated_s[c] if cls == c else 0.0 for s, cls in rows]) for c in CLASSES}
    columns["ops"] = np.array([float(s.ops[c]) for s, c in rows])
    coef, _ = fit_nonnegative({k: v / y for k, v in columns.items()}, np.ones_like(y))
    predicted = np.sum([coef[k] * v for k, v in columns.items()], axis=0)
    out: dict[str, Any] = {"kernel_overhead_s": round_sig(coef["ops"])}
    fits: dict[str, FitInfo] = {}

    def info(cls: str) -> FitInfo:
        mask = np.array([c == cls for _, c in rows]) if cls != "ops" else np.ones(len(rows), bool)
        factor = "" if cls == "ops" else f"; factor {round_sig(coef[cls], 3):g} on the microbenchmark's rate"
        return FitInfo(samples=int(mask.sum()), rel_error=rel_error(predicted[mask], y[mask]),
                       source=SOURCE.format(cls="per-class" if cls == "ops" else cls) + factor)

    fits["device.kernel_overhead_s"] = info("ops")
    if coef["gemm"] > 0:
        a = coef["gemm"]
        out["gemm_curve_efficiency"] = [round_sig(min(1.0, e / a)) for e in device.get("gemm_curve_efficiency", [])]
        if "gemm_efficiency" in device:
            out["gemm_efficiency"] = round_sig(min(1.0, device["gemm_efficiency"] / a))
        for key in ("gemm_curve_efficiency", "gemm_efficiency"):
            fits[f"device.{key}"] = info("gemm")
    if coef["attention"] > 0 and "attention_efficiency" in device:
        out["attention_efficiency"] = round_sig(min(1.0, device["attention_efficiency"] / coef["attention"]))
        fits["device.attention_efficiency"] = info("attention")
    for cls in (OpClass.ACTIVATION, OpClass.ELEMENTWISE):
        if coef[cls] > 0:
            out[f"{cls}_efficiency"] = round_sig(min(1.0, 1.0 / coef[cls]))
            fits[f"device.{cls}_efficiency"] = info(cls)
    return {k: v for k, v in out.items() if v != []}, fits

