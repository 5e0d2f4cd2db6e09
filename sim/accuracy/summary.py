"""The error band of one simulated job, as the ``error_band`` object of ``simulate --json`` and a
line of its table (:mod:`sim.accuracy.band` over the shipped residuals)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from sim.accuracy.band import Band, error_band
from sim.accuracy.job_class import JobClass, job_class
from sim.accuracy.residuals import shipped_residuals
from sim.job import Job

DIGITS = 4


def job_band(job: Job) -> Band | None:
    """The band for ``job`` from the shipped residuals (None: too few residuals at all)."""
    return class_band(job_class(job))


@lru_cache(maxsize=4096)
def class_band(features: JobClass) -> Band | None:
    """The band for a job of these features (memoized: explore asks for many plans of one class)."""
    return error_band(features, shipped_residuals())


def band_object(band: Band | None, step_s: float) -> dict[str, Any]:
    """``error_band``: the measured step's interval (s and as factors of the simulated step), its
    confidence, whether it rests on comparable runs, and which."""
    if band is None:
        return {"confidence": None, "low_s": None, "high_s": None, "comparable": False,
                "basis": "too few published runs to derive a band", "runs": [], "sources": []}
    return {"confidence": band.confidence, "low_s": _sig(band.low * step_s), "high_s": _sig(band.high * step_s),
            "low_factor": _sig(band.low), "high_factor": _sig(band.high), "comparable": band.comparable,
            "basis": band.basis, "runs": list(band.runs), "sources": list(band.sources)}


def band_text(obj: dict[str, Any], step_s: float) -> str:
    """One line for the table output, from :func:`band_object`'s object."""
    if obj["low_s"] is None:
        return "error band: " + obj["basis"]
    caveat = "" if obj["comparable"] else " (NOT comparable runs: a rough guide only)"
    return (f"{obj['confidence']:.0%} band for the measured step: {obj['low_s']:.4g}-{obj['high_s']:.4g} s "
            f"(x{obj['low_factor']:.2f}-{obj['high_factor']:.2f} the simulated {step_s:.4g} s), from "
            f"{obj['basis']}{caveat}; coverage: trainsim validate --published all")


def _sig(x: float) -> float:
    return round(x, DIGITS - 1 - int(math.floor(math.log10(abs(x))))) if x > 0 else 0.0
