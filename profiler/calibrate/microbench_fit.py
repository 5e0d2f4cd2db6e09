"""Profile fields from microbenchmark samples (:mod:`compute_bench`, :mod:`collective_bench`).

- ``peak_fp32_flops`` (and the other dtypes' peaks): the best GEMM rate seen (an achieved peak:
  the efficiencies are fractions of it); ``gemm_efficiency``: at the largest GEMMs;
  ``gemm_curve_*``: median efficiency in equal-count bins of GEMM size.
- ``attention_efficiency``: median rate of causal SDPA over the peak, each sample's divided by the
  rate the simulator applies to a causal op of its shape on the profile's device
  (:func:`schedules.attention_kernels.fused_attention_rate`: the causal mask and the kernel's
  length; 1 on a device without a CUDA compute capability, such as the CPU host), so a causal op of
  a measured shape is priced at its measured time and the device's field keeps its meaning, the
  unmasked 8k kernel's rate (not slowed twice).
- the memory of the ``a + b`` sweep: time = overhead + min(B, c) / cache_GBps + (B - c)+ /
  hbm_GBps, fitted over a grid of cache sizes c (least squares, the best c kept):
  ``kernel_overhead_s``, ``cache_bytes``, ``cache_GBps``, ``hbm_GBps`` (``hbm_efficiency`` = 1);
- ``alloc_GBps``: fresh output bytes over the extra time of an allocating ``a + b`` against the
  same add into an existing buffer (median over 1-64 MiB; 0 when allocating costs nothing);
- ``host.dram_GBps``: the bytes per second that 2, 4, ... concurrent streaming processes achieve
  together (median over the counts); ``host.compute_capacity``: the probe steps per second that
  concurrent processes achieve together (median over the counts), over one process alone (the
  host's effective cores, oversubscription losses included).
- collectives: one :class:`CollectiveFit` per (operation, group size), time = alpha + S x
  bus_factor / busbw fitted over the sizes (link: the host's, "shm", on a CPU host).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler.calibrate.fitting import Fit, binned_curve, fit_line, round_sig
from schedules.attention_kernels import fused_attention_rate
from topo.collective_fit import CollectiveFit
from topo.collective_ops import bus_factor
from topo.hardware_profile import FitInfo

Sample = dict[str, Any]
CURVE_BINS = 6


def _of(samples: list[Sample], bench: str) -> list[Sample]:
    return sorted((s for s in samples if s["bench"] == bench), key=lambda s: sorted(s.items()))


def _info(fit: Fit, source: str) -> FitInfo:
    return FitInfo(samples=fit.samples, rel_error=fit.rel_error, source=source)


def compute_fields(samples: list[Sample], compute_capability: int = 0) -> tuple[dict[str, Any], dict[str, FitInfo]]:
    """Device fields and their fit records from the compute sweep on a device of
    ``compute_capability`` (the profile's cluster's; 0: none)."""
    fields: dict[str, Any] = {}
    fits: dict[str, FitInfo] = {}
    gemm = _of(samples, "gemm")
    if gemm:
        rates = [s["flops"] / s["seconds"] for s in gemm]
        peak = max(rates)
        xs, ys = binned_curve([s["flops"] for s in gemm], [r / peak for r in rates], CURVE_BINS)
        for dtype in ("fp32", "tf32", "bf16", "fp16"):
            fields[f"peak_{dtype}_flops"] = round_sig(peak)
        fields["gemm_curve_flops"] = [round_sig(x) for x in xs]
        fields["gemm_curve_efficiency"] = [round_sig(min(1.0, y)) for y in ys]
        fields["gemm_efficiency"] = fields["gemm_curve_efficiency"][-1]
        curve = np.interp(np.log([s["flops"] for s in gemm]), np.log(xs), ys)
        err = _median_rel([peak * c for c in curve], rates)
        fits["device.gemm_curve_efficiency"] = FitInfo(samples=len(gemm), rel_error=err,
                                                       source=f"GEMM sweep, {len(xs)} size bins")
        fits["device.gemm_curve_flops"] = fits["device.gemm_curve_efficiency"]
        fits["device.gemm_efficiency"] = FitInfo(samples=len(gemm), rel_error=err,
                                                 source="GEMM sweep: the largest size bin")
        fits["device.peak_fp32_flops"] = FitInfo(samples=len(gemm), rel_error=0.0, source="best GEMM rate")
    attention = _of(samples, "attention")
    if attention and gemm:
        eff = [s["flops"] / s["seconds"] / fields["peak_fp32_flops"]
               / fused_attention_rate(compute_capability, s["seq"], s["seq"], s["head_dim"], True) for s in attention]
        fields["attention_efficiency"] = round_sig(min(1.0, float(np.median(eff))))
        fits["device.attention_efficiency"] = FitInfo(
            samples=len(eff), rel_error=_median_rel([fields["attention_efficiency"]] * len(eff), eff),
            source="causal SDPA sweep")
    elementwise = _of(samples, "elementwise")
    if elementwise:
        fields_m, fits_m = memory_fields(elementwise)
        fields.update(fields_m)
        fits.update(fits_m)
    fresh = _of(samples, "fresh")
    if fresh:
        fields["alloc_GBps"], fits["device.alloc_GBps"] = alloc_rate(fresh)
    return fields, fits


def alloc_rate(samples: list[Sample]) -> tuple[float, FitInfo]:
    """GB/s of first touch from the fresh-output sweep (0 when no size pays for allocating)."""
    extra = np.asarray([s["seconds"] - s["seconds_reused"] for s in samples], float)
    fresh = np.asarray([s["out_bytes"] for s in samples], float)
    if not (extra > 0).any() or float(np.median(extra / np.maximum(np.asarray(
            [s["seconds_reused"] for s in samples], float), 1e-12))) < 0.1:
        return 0.0, FitInfo(samples=len(samples), rel_error=0.0,
                            source="allocating a + b vs into an existing buffer: no extra time (>= 10%)")
    rate = float(np.median(fresh[extra > 0] / extra[extra > 0]))
    err = _median_rel(list(fresh / rate), list(np.maximum(extra, 1e-12)))
    return round_sig(rate / 1e9), FitInfo(samples=len(samples), rel_error=err,
                                          source="allocating a + b vs into an existing buffer, 1-64 MiB: "
                                                 "fresh bytes / extra time (median)")


def _cache_fit(b: np.ndarray, t: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    """Least squares of t = o + min(b, c) x + (b - c)+ y (weights 1/t), clamped >= 0; error."""
    design = np.column_stack([np.ones_like(b), np.minimum(b, c), np.maximum(b - c, 0.0)]) / t[:, None]
    coef = np.clip(np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0], 0.0, None)
    pred = coef[0] + coef[1] * np.minimum(b, c) + coef[2] * np.maximum(b - c, 0.0)
    return coef, float(np.median(np.abs(pred - t) / t))


def memory_fields(samples: list[Sample]) -> tuple[dict[str, Any], dict[str, FitInfo]]:
    """Overhead, cache and memory bandwidths from the element-wise sweep (module docstring)."""
    b = np.asarray([s["bytes"] for s in samples], float)
    t = np.asarray([s["seconds"] for s in samples], float)
    grid = [c for c in np.geomspace(1 << 16, 1 << 28, 25) if b.min() < c < b.max()] or [float(b.max())]
    best = min(((c, *_cache_fit(b, t, c)) for c in grid), key=lambda x: (x[2], x[0]))
    c, (overhead, per_cache, per_dram), err = best
    fields: dict[str, Any] = {"kernel_overhead_s": round_sig(overhead), "hbm_efficiency": 1.0,
                              "cache_bytes": round_sig(c), "cache_GBps": round_sig(1e-9 / per_cache) if per_cache else 1e3,
                              "hbm_GBps": round_sig(1e-9 / per_dram) if per_dram else 1e3}
    info = FitInfo(samples=len(samples), rel_error=round_sig(err, 3),
                   source="element-wise add sweep: overhead + cached bytes / cache bw + the rest / memory bw")
    return fields, {f"device.{k}": info for k in ("kernel_overhead_s", "cache_bytes", "cache_GBps", "hbm_GBps")}


def host_fields(samples: list[Sample]) -> tuple[dict[str, Any], dict[str, FitInfo]]:
    """The host's DRAM bandwidth and effective cores from the concurrent sweeps."""
    fields: dict[str, Any] = {}
    fits: dict[str, FitInfo] = {}
    for kind, field, unit in (("memory", "dram_GBps", 1e9), ("compute", "compute_capacity", None)):
        runs = _of(samples, f"{kind}_streams")
        if not runs:
            continue
        alone = next((sum(s["rates"]) for s in runs if s["processes"] == 1), None)
        shared = [sum(s["rates"]) for s in runs if s["processes"] > 1] or [sum(s["rates"]) for s in runs]
        value = float(np.median(shared)) / (unit if unit else (alone or float(np.median(shared))))
        fields[field] = round_sig(value)
        spread = float(np.median([abs(t / np.median(shared) - 1.0) for t in shared]))
        fits[f"host.{field}"] = FitInfo(
            samples=sum(len(s["rates"]) for s in runs), rel_error=round_sig(spread, 3),
            source=f"{kind} work in 2..{max(s['processes'] for s in runs)} concurrent processes: median total"
                   + ("" if unit else " / one process alone"))
    return fields, fits


def _median_rel(pred: list[float], meas: list[float]) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    return round_sig(float(np.median(np.abs(p - m) / m)), 3)


def collective_fields(samples: list[Sample], link: str) -> tuple[list[CollectiveFit], dict[str, FitInfo]]:
    """One fit per (operation, group size) measured, on ``link``."""
    groups: dict[tuple[str, int], list[Sample]] = {}
    for s in _of(samples, "collective"):
        groups.setdefault((s["op"], int(s["ranks"])), []).append(s)
    out, fits = [], {}
    for (op, n), group in sorted(groups.items()):
        x = [s["bytes"] * bus_factor(op, n) for s in group]
        fit = fit_line(x, [s["seconds"] for s in group])
        alpha, per_byte = fit.params
        busbw = 1.0 / per_byte / 1e9 if per_byte > 0 else 1e3
        backend = str(group[0].get("backend", "measured"))
        out.append(CollectiveFit(op=op, link=link, algorithm=backend, ranks=n, alpha_s=round_sig(alpha),
                                 busbw_GBps=round_sig(busbw)))
        fits[f"collectives.{op}.{link}.{n}"] = _info(fit, f"{backend} {op} on {n} ranks, {len(group)} sizes")
    return out, fits
