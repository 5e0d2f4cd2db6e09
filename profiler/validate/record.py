"""Record one suite (or calibration) run: launch the trainer, keep its compact Timeline.

The trainer runs under torchrun into a scratch directory; its Kineto traces are parsed into the
measured Timeline, which is stored compactly (:mod:`profiler.validate.store`) next to the
manifest in the run's directory, and the raw traces are dropped (they are ~10x larger). A
recording during which other processes kept more than ``max_background_cores`` busy is repeated
(up to ``attempts`` times, keeping the quietest); ``recording.json`` says how busy it was.

Speed reference: this VM runs the same work up to 1.5x slower or faster from one quarter hour to
the next (other tenants of the host; invisible from inside). Right before each recording the
one-rank calibration run of the same model (:func:`profiler.validate.suite.reference_of`) runs
for 3 steps, and its median step time is kept as ``reference.step_s``: comparing it with the
same run's step time during calibration gives the machine's speed during the recording
(``profiler.validate.compare.run_speed``), used only with a profile calibrated with
``--speed-reference``: on this VM the reference did not track the recordings well enough for
the correction to help (docs/validation/recorded-suite.md). A short MLP probe taken with the machine otherwise idle
did not track this speed; the trainer's own one-rank step does, by construction.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import invalid
from core.settings import is_real
from profiler.calibrate.quiet import BackgroundMonitor, wait_for_quiet
from profiler.kineto import load_run
from profiler.launch import run_profile
from profiler.measured import measured_timeline
from profiler.validate.measured import REPEAT_PREFIX, repeat_directories
from profiler.validate.store import write_timeline
from profiler.validate.suite import RunSpec, reference_of, run_directory
from sim.atomic import write_bytes_atomic, write_text_atomic

RECORDING = "recording.json"


REFERENCE_STEPS = 3


@dataclass(frozen=True)
class Recorded:
    """A stored recording: where, how busy the machine was, after how many attempts, and the
    reference run's median step time just before it (None without one)."""

    path: Path
    background_cores: float
    attempts: int
    reference_step_s: float | None


def profiled_step_times(manifest: dict[str, Any]) -> list[float]:
    """Wall-clock seconds of a run's profiled steps (all steps if the manifest does not say)."""
    times = list(manifest["step_times_s"])
    return [float(times[i]) for i in manifest.get("profiled_steps") or range(len(times))]


def median_step_s(manifest: dict[str, Any]) -> float:
    """Median wall-clock time of a run's profiled steps (its manifest)."""
    return float(statistics.median(profiled_step_times(manifest)))


def reference_step(spec: RunSpec, scratch: Path, timeout_s: float) -> float | None:
    """Run the reference of ``spec`` for a few steps; its median step time (None if none)."""
    reference = reference_of(spec)
    if reference is None:
        return None
    run = run_profile(dataclasses.replace(reference.config(), steps=REFERENCE_STEPS), scratch, timeout_s=timeout_s)
    if not run.ok or run.manifest is None:
        raise RuntimeError(f"{reference.name} (reference of {spec.name}): {run.failure()}")
    return median_step_s(run.manifest)


def _record_once(spec: RunSpec, scratch: Path, timeout_s: float,
                 on_line: Callable[[str], None] | None) -> tuple[float, float | None]:
    """One launch into ``scratch`` after its reference; returns the background cores during
    both and the reference's step time."""
    wait_for_quiet()
    monitor = BackgroundMonitor().start()
    reference = reference_step(spec, scratch.with_name(scratch.name + "-reference"), timeout_s)
    run = run_profile(spec.config(), scratch, timeout_s=timeout_s, on_line=on_line)
    busy = monitor.stop()
    if not run.ok:
        raise RuntimeError(f"{spec.name}: {run.failure()}")
    return busy, reference


def store_run(raw: Path, dest: Path, info: dict[str, object]) -> Path:
    """Parse the raw traces in ``raw``; store manifest, compact Timeline and ``info`` in ``dest``."""
    timeline = measured_timeline(load_run(raw))
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("rank*.json.gz"):
        stale.unlink()
    write_bytes_atomic(dest / "manifest.json", (raw / "manifest.json").read_bytes())
    write_timeline(timeline, dest)
    write_text_atomic(dest / RECORDING, json.dumps(info, indent=1, sort_keys=True) + "\n")
    return dest


def read_recording(path: str | Path) -> dict[str, object]:
    """The ``recording.json`` of a run directory ({} if absent); not a JSON object: a one-line
    ValueError naming the file."""
    file = Path(path) / RECORDING
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object")
    return data


def run_reference_s(path: str | Path) -> float | None:
    """The median step time of the run's reference, if it was recorded (a ``reference`` that is
    not an object with ``step_s`` seconds > 0 is a one-line ValueError naming the file)."""
    reference = read_recording(path).get("reference")
    if reference is None:
        return None
    if not isinstance(reference, dict):
        raise invalid(f"{Path(path) / RECORDING}: reference", reference, "expected an object with step_s")
    step: Any = reference.get("step_s")
    if not is_real(step) or step <= 0:
        raise invalid(f"{Path(path) / RECORDING}: reference.step_s", step, "expected seconds > 0")
    return float(step)


def recorded_reference_s(path: str | Path) -> float | None:
    """The machine's speed reference over a run's recordings: the median of the reference step
    times recorded with the run directory and its ``repeat-<k>/`` recordings (None: none)."""
    found = [s for s in (run_reference_s(d) for d in [Path(path), *repeat_directories(path)]) if s]
    return statistics.median(found) if found else None


def record_run(spec: RunSpec, root: str | Path, *, repeat: int = 1, attempts: int = 3,
               max_background_cores: float = 0.2, timeout_s: float = 900.0,
               on_line: Callable[[str], None] | None = None) -> Recorded:
    """Record ``spec`` into ``root/<spec.directory>`` (``repeat`` k > 1: into its
    ``repeat-<k>/``, a further recording of the same configuration), retrying while the machine
    was busy; keeps the quietest attempt."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat!r} is invalid: expected an integer >= 1")
    best: tuple[float, Path, float | None] | None = None
    with tempfile.TemporaryDirectory(prefix="trainsim-record-") as tmp:
        failure = ""
        for attempt in range(1, attempts + 1):
            scratch = Path(tmp) / f"attempt{attempt}"
            try:
                busy, reference = _record_once(spec, scratch, timeout_s, on_line)
            except RuntimeError as exc:  # a failed launch (e.g. a rendezvous port taken): try again
                failure = str(exc)
                continue
            if best is None or busy < best[0]:
                best = (busy, scratch, reference)
            if busy <= max_background_cores:
                break
        if best is None:
            raise RuntimeError(f"{spec.name}: every attempt failed; last: {failure}")
        busy, raw, reference = best
        info: dict[str, object] = {"background_cores": round(busy, 3), "attempts": attempt}
        ref = reference_of(spec)
        if reference is not None and ref is not None:
            info["reference"] = {"run": ref.directory, "steps": REFERENCE_STEPS, "step_s": round(reference, 6)}
        dest = run_directory(root, spec)
        dest = store_run(raw, dest if repeat == 1 else dest / f"{REPEAT_PREFIX}{repeat}", info)
    return Recorded(dest, busy, attempt, reference)
