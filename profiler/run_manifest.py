"""A run's ``manifest.json``, read in one place and checked where trainsim reads it.

The trainer writes it (:mod:`profiler.trainer.manifest`); a user may edit one, or write one beside
traces recorded elsewhere (only ``process_groups`` or ``mesh``: :mod:`profiler.kineto.groups`).
Every key trainsim reads is checked here, so a hand-edited, mistyped or foreign manifest is a
one-line error naming the file, the key, the value and what is valid, not a crash deep inside
``analyze``, ``validate``, ``calibrate`` or ``replay``:

- ``config``: the trainer's run configuration (:meth:`profiler.trainer.config.TrainConfig.from_dict`:
  its model, degrees, schedule and batch, every value under the trainer's own rules);
- ``world_size``: an integer >= 1, tp x pp x dp of ``config`` when both are there;
- ``step_times_s`` (s per step), ``step_times_s_by_rank`` (per step, s per rank): numbers >= 0;
- ``profiled_steps``: step indices (integers >= 0, each a step of ``step_times_s``);
- ``device_type``, ``dtype``: texts; ``cpu_count``: an integer >= 1 or null.

Keys not listed are not read and not checked (process groups: :mod:`profiler.kineto.groups`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from core.errors import invalid, require_nonnegative_int, require_number, require_positive_int
from profiler.trainer.config import TrainConfig
from profiler.trainer.files import MANIFEST


def load_manifest(directory: str | Path) -> dict[str, Any] | None:
    """The checked ``manifest.json`` of a run directory (None when there is none); a bad one is a
    ValueError ``<path>: <what is wrong>``."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc})") from None
    try:
        check_manifest(manifest)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return manifest  # type: ignore[no-any-return]


def require_manifest(directory: str | Path) -> dict[str, Any]:
    """:func:`load_manifest` of a directory that must be a recorded run."""
    manifest = load_manifest(directory)
    if manifest is None:
        raise ValueError(f"{directory}: no {MANIFEST} (not a `trainsim profile` run directory)")
    return manifest


def check_manifest(manifest: Any) -> None:
    """Raise a one-line ValueError unless every key trainsim reads of ``manifest`` is well formed."""
    if not isinstance(manifest, dict):
        raise ValueError("expected a JSON object")
    config = TrainConfig.from_dict(manifest["config"]) if "config" in manifest else None
    world = manifest.get("world_size")
    if "world_size" in manifest:
        require_positive_int("world_size", world)
        if config is not None and world != config.world_size:
            raise invalid("world_size", world, f"expected tp*pp*dp = {config.world_size}, as config says")
    _numbers("step_times_s", manifest.get("step_times_s"))
    by_rank = manifest.get("step_times_s_by_rank")
    if by_rank is not None:
        _list("step_times_s_by_rank", by_rank)
        for i, row in enumerate(by_rank):
            _numbers(f"step_times_s_by_rank[{i}]", row)
    steps = manifest.get("profiled_steps")
    if steps is not None:
        _list("profiled_steps", steps)
        times = manifest.get("step_times_s")
        for i, step in enumerate(steps):
            require_nonnegative_int(f"profiled_steps[{i}]", step)
            if times is not None and step >= len(times):
                raise invalid(f"profiled_steps[{i}]", step, f"expected a step of step_times_s (0..{len(times) - 1})")
    for key in ("device_type", "dtype"):
        if key in manifest and not isinstance(manifest[key], str):
            raise invalid(key, manifest[key], "expected a text")
    if manifest.get("cpu_count") is not None:
        require_positive_int("cpu_count", manifest["cpu_count"])


def _list(key: str, value: Any) -> None:
    if not isinstance(value, list):
        raise invalid(key, value, "expected a list")


def _numbers(key: str, value: Any) -> None:
    """``value`` is absent (None) or a list of finite numbers >= 0."""
    if value is None:
        return
    _list(key, value)
    for i, x in enumerate(value):
        require_number(f"{key}[{i}]", x)
