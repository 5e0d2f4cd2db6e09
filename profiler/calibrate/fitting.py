"""Small deterministic fits (numpy least squares) and the rounding every fitted number gets.

Each fit returns its value(s), the number of samples and the median relative error of the fitted
model over its samples (|predicted - measured| / measured), which the profile records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SIGNIFICANT = 4  # significant digits kept in a profile (calibrating twice gives the same file)


def round_sig(x: float, digits: int = SIGNIFICANT) -> float:
    """``x`` rounded to ``digits`` significant digits (0.0 stays 0.0)."""
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(round(x, digits - 1 - math.floor(math.log10(abs(x)))))


@dataclass(frozen=True)
class Fit:
    """Fitted parameters with their sample count and median relative error."""

    params: tuple[float, ...]
    samples: int
    rel_error: float


def rel_error(pred: np.ndarray, meas: np.ndarray) -> float:
    """Median |pred - meas| / meas over the samples with meas > 0 (0 when there are none)."""
    ok = meas > 0
    if not ok.any():
        return 0.0
    return round_sig(float(np.median(np.abs(pred[ok] - meas[ok]) / meas[ok])), 3)


def fit_line(x: list[float], y: list[float], *, relative: bool = True) -> Fit:
    """y = a + b x by least squares (weighted by 1/y when ``relative``, so small and large
    samples count alike), with a, b clamped at >= 0 (refitting the other alone if one is)."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    if xs.size == 0:
        raise ValueError("fit_line: no samples")
    w = 1.0 / ys if relative else np.ones_like(ys)
    design = np.column_stack([np.ones_like(xs), xs]) * w[:, None]
    a, b = np.linalg.lstsq(design, ys * w, rcond=None)[0] if xs.size > 1 else (float(ys[0]), 0.0)
    if b < 0:
        a, b = float(np.sum(ys * w * w) / np.sum(w * w)), 0.0
    if a < 0:
        a, b = 0.0, float(np.sum(xs * ys * w * w) / np.sum(xs * xs * w * w))
    return Fit((float(a), float(b)), int(xs.size), rel_error(a + b * xs, ys))


def fit_scale(n: list[float], y: list[float], base: list[float] | None = None) -> Fit:
    """y = base + k n (k >= 0) by least squares: the per-item cost ``k`` of ``n`` items on top
    of a known ``base``; the error is that of the whole prediction base + k n."""
    ns, ys = np.asarray(n, float), np.asarray(y, float)
    bs = np.zeros_like(ys) if base is None else np.asarray(base, float)
    if ns.size == 0 or not (ns > 0).any():
        raise ValueError("fit_scale: no samples with items")
    k = max(0.0, float(np.sum(ns * (ys - bs)) / np.sum(ns * ns)))
    return Fit((k,), int(ns.size), rel_error(bs + k * ns, ys))


def binned_curve(x: list[float], y: list[float], bins: int) -> tuple[list[float], list[float]]:
    """Medians of ``y`` in ``bins`` equal-count bins of ascending ``x`` (x: geometric mean):
    a monotone-x table for log-linear interpolation."""
    order = np.argsort(np.asarray(x, float), kind="stable")
    xs, ys = np.asarray(x, float)[order], np.asarray(y, float)[order]
    groups = [g for g in np.array_split(np.arange(xs.size), min(bins, xs.size)) if g.size]
    cx = [float(np.exp(np.mean(np.log(xs[g])))) for g in groups]
    cy = [float(np.median(ys[g])) for g in groups]
    keep = [i for i in range(len(cx)) if i == 0 or cx[i] > cx[i - 1]]
    return [cx[i] for i in keep], [cy[i] for i in keep]


def fit_nonnegative(columns: dict[str, np.ndarray], y: np.ndarray) -> tuple[dict[str, float], float]:
    """Least squares y = sum_k c_k x_k with every c_k >= 0 (columns whose coefficient comes out
    negative are dropped and the rest refitted); returns the coefficients by column name and the
    median relative error of the prediction."""
    names = list(columns)
    coef = np.zeros(0)
    while names:
        design = np.column_stack([np.asarray(columns[n], float) for n in names])
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        if not (coef < 0).any():
            break
        names = [n for n, c in zip(names, coef, strict=True) if c >= 0]
    values = {n: 0.0 for n in columns}
    values.update({n: float(c) for n, c in zip(names, coef, strict=True)})
    pred = np.column_stack([np.asarray(columns[n], float) for n in columns]) @ np.asarray(list(values.values()))
    ys = np.asarray(y, float)
    return values, rel_error(pred, ys)
