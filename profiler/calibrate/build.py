"""Assemble a hardware profile from microbenchmark samples and/or recorded runs.

The microbenchmarks give the device's rates (GEMM curve, attention, cache and memory bandwidth,
a first kernel overhead), the host's effective cores and DRAM bandwidth, and the collectives;
the one-rank runs then scale each op class's rate to what it reaches inside a training step and
fit the per-op overhead (:mod:`op_class_fit`; they replace the microbenchmark's kernel
overhead), all runs fit the other overheads on top of them (:mod:`runs_fit`) and, from
oversubscribed runs, the scheduling delay. The
result is deterministic for the same inputs: samples are sorted, fits are closed-form least
squares, numbers are rounded to 4 significant digits and the TOML keys are sorted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiler.calibrate.fitting import round_sig
from profiler.calibrate.microbench_fit import collective_fields, compute_fields, host_fields
from profiler.calibrate.op_class_fit import class_sample, fit_class_rates
from profiler.calibrate.runs_fit import describe, fit_overheads, fit_sched_delay, run_samples
from profiler.calibrate.samples_check import check_samples
from profiler.host_identity import IDENTITY_KEYS
from profiler.run_manifest import require_manifest
from profiler.validate.record import median_step_s, recorded_reference_s
from sim.atomic import write_text_atomic
from topo import get_cluster
from topo.collective_fit import CollectiveFit
from topo.hardware_profile import FitInfo, HardwareProfile, dump_profile_toml

HEADER = """trainsim hardware profile, written by `trainsim calibrate` (do not edit by hand: recalibrate).
Sections override fields of the cluster's device, host and links; [[collectives]] are measured
collective costs; [fit."<field>"] says how each number was fitted: samples used and the median
relative error of the fitted model over them."""


def read_samples(path: str | Path) -> dict[str, Any]:
    """A samples file written by :func:`write_samples`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or not UTF-8
        reason = exc.strerror if isinstance(exc, OSError) else " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: cannot read microbenchmark samples: {reason}") from None
    if not isinstance(data, dict) or "samples" not in data:
        raise ValueError(f"{path}: not a samples file (no 'samples' key)")
    if not isinstance(data["samples"], list) or not all(isinstance(s, dict) for s in data["samples"]) \
            or not isinstance(data.get("host", {}), dict):
        raise ValueError(f"{path}: not a samples file ('samples' must be a list of objects, 'host' an object)")
    try:
        check_samples(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return data


def write_samples(data: dict[str, Any], path: str | Path) -> Path:
    """Write samples as sorted, indented JSON."""
    return write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def samples_path(profile: Path) -> Path:
    """Where ``calibrate --microbench`` keeps its measurements: ``<profile>.samples.json``."""
    return profile.with_suffix(".samples.json")


def intra_node_link(cluster: str) -> str:
    """Kind of the link inside a node of the cluster preset (where a one-node sweep runs)."""
    spec = get_cluster(cluster)
    if spec.intra_node == "nvswitch" and spec.nvlink is not None:
        return spec.nvlink.kind
    return spec.pcie.kind


def build_profile(*, name: str, cluster: str = "cpu-host", bench: dict[str, Any] | None = None,
                  runs: list[str] | None = None, speed_reference: bool = False) -> HardwareProfile:
    """The profile from microbenchmark data (``bench``) and recorded runs (directories);
    ``speed_reference``: keep the one-rank runs' reference step times (``meta.reference_step_s``),
    with which fitting and validation scale each recording by the machine's speed during it
    (:func:`profiler.validate.compare.run_speed`); without them every recording counts as made
    at the calibration's speed."""
    device: dict[str, Any] = {}
    host: dict[str, Any] = {}
    fits: dict[str, FitInfo] = {}
    collectives: tuple[CollectiveFit, ...] = ()
    meta = {"name": name, "cluster": cluster}
    if bench is not None:
        samples = sorted(bench["samples"], key=lambda s: json.dumps(s, sort_keys=True))
        device, fits = compute_fields(samples, get_cluster(cluster).device.compute_capability)
        coll, coll_fits = collective_fields(samples, intra_node_link(cluster))
        collectives, fits = tuple(coll), {**fits, **coll_fits}
        info = bench.get("host", {})
        if info.get("device") == "cpu" and info.get("cpu_count"):
            host["cpu_cores"] = int(info["cpu_count"])
            host_values, host_fits = host_fields(samples)
            host, fits = {**host, **host_values}, {**fits, **host_fits}
        meta.update({k: str(info[k]) for k in ("torch", "backend", "machine", *IDENTITY_KEYS) if k in info})
        meta["microbench_background_cores"] = str(info.get("background_cores", ""))
    references = reference_steps_of(runs or []) if speed_reference else {}
    if references:
        meta["reference_step_s"] = json.dumps(references, sort_keys=True)
    profile = HardwareProfile(meta=meta, device=device, host=host, collectives=collectives, fits=fits)
    if runs:
        one_rank = [path for path in sorted(runs) if _world_size(path) == 1]
        rates, rate_fits = fit_class_rates([class_sample(path, profile) for path in one_rank], device)
        device, fits = {**device, **rates}, {**fits, **rate_fits}
        profile = HardwareProfile(meta=meta, device=device, host=host, collectives=collectives, fits=fits)
        samples_runs = [run_samples(path, profile) for path in sorted(runs)]
        overheads, run_fits = fit_overheads(samples_runs, kernel_overhead_s=rates.get("kernel_overhead_s"))
        meta = {**meta, "runs": ", ".join(Path(r).name for r in sorted(runs)),
                "run_samples": json.dumps(describe(samples_runs), sort_keys=True)}
        profile = HardwareProfile(meta=meta, device={**device, **overheads}, host=host,
                                  collectives=collectives, fits={**fits, **run_fits})
        sched, sched_fits = fit_sched_delay(list(runs), profile)
        profile = HardwareProfile(meta=meta, device=profile.device, host={**host, **sched},
                                  collectives=collectives, fits={**profile.fits, **sched_fits})
    return profile


def _world_size(path: str | Path) -> int:
    return int(require_manifest(path).get("world_size", 0))


def reference_steps_of(runs: list[str]) -> dict[str, float]:
    """Model -> the machine's speed reference at calibration (see ``profiler.validate.record``):
    the reference run's median step time recorded with each one-rank calibration run (median
    over its recordings, as :func:`profiler.validate.compare.run_speed` takes it) — the same
    short unprofiled run every later recording times before itself, so the two compare like with
    like — or, for runs recorded without one, the run's own median profiled step."""
    out = {}
    for path in sorted(runs):
        manifest = require_manifest(path)
        config = manifest.get("config") or {}
        if int(manifest.get("world_size", 0)) == 1 and config.get("model"):
            reference = recorded_reference_s(path)
            out[str(config["model"]["name"])] = round_sig(reference if reference else median_step_s(manifest))
    return out


def write_profile(profile: HardwareProfile, path: str | Path) -> Path:
    """Write the profile TOML (with the explanatory header)."""
    return write_text_atomic(path, dump_profile_toml(profile, HEADER))


def fit_rows(profile: HardwareProfile) -> list[dict[str, Any]]:
    """One row per fitted number: field, value, samples, median relative error, source."""
    values: dict[str, Any] = {f"device.{k}": v for k, v in profile.device.items()}
    values.update({f"host.{k}": v for k, v in profile.host.items()})
    for fit in profile.collectives:
        values[f"collectives.{fit.op}.{fit.link}.{fit.ranks}"] = (
            f"alpha {fit.alpha_s:.3g} s, busbw {fit.busbw_GBps:.3g} GB/s")
    rows = []
    for key in sorted(values):
        info = profile.fits.get(key)
        value = values[key]
        if isinstance(value, list):
            value = "[" + ", ".join(f"{round_sig(v, 3):g}" for v in value) + "]"
        rows.append({"field": key, "value": value, "samples": info.samples if info else None,
                     "rel_error": info.rel_error if info else None, "source": info.source if info else "given"})
    return rows
