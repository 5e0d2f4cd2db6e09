"""The ``[reliability]`` TOML table (job files, cluster files, or a file of its own)::

    [reliability]
    preset = "meta-rsc1"        # start from a preset (default: no classes)
    spare_nodes = 16            # hot spares
    seed = 0                    # Monte Carlo seed; samples = runs simulated
    samples = 2000
    weibull_shape = 0.8         # optional: Weibull times between failures
    pue = 1.1                   # facility overhead on energy
    price_per_kwh_usd = 0.08
    [reliability.classes.gpu]   # one table per class: gpu hbm nvlink nic switch host software maintenance hardware
    per_1000_node_days = 3.0
    kills_job = true
    detect_s = 60
    repair_s = 14400
    [reliability.classes.nvlink]   # a failure that only slows a rank (sim.run.slow_ranks)
    per_1000_node_days = 1.0
    kills_job = false
    slowdown = 1.5              # the degraded GPU's compute takes 1.5 x a median GPU's
    detect_s = 1800             # runs slowed this long, then swapped at a planned restart
    [reliability.restart]       # reschedule_s, init_s, init_s_per_1k_ranks, warmup_s
    init_s = 120
    [reliability.checkpoint]    # interval_s (seconds or "auto"), mode (sync, async, memory)
    interval_s = "auto"
    mode = "async"
    [reliability.storage]       # aggregate_GBps, node_GBps, capacity_bytes, keep
    aggregate_GBps = 2000

A class table replaces the preset's class of that name. Unknown keys, classes and modes are
one-line errors naming the key and what is valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.run.inputs import (
    CheckpointMode,
    CheckpointPolicy,
    ClassRate,
    FailureClass,
    ReliabilityInputs,
    RestartCost,
    StorageSpec,
    bad,
)
from sim.run.presets import get_reliability
from topo.toml_file import load_toml

TOP_KEYS = ("preset", "spare_nodes", "seed", "samples", "weibull_shape", "pue", "price_per_kwh_usd",
            "classes", "restart", "checkpoint", "storage")
CLASS_KEYS = ("per_1000_node_days", "kills_job", "detect_s", "repair_s", "slowdown")
CLASS_NAMES = tuple(c.value for c in FailureClass)
MODES = tuple(m.value for m in CheckpointMode)


def _table(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise bad(name, value, "expected a table")
    return value


def _keys(name: str, table: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    for key, value in table.items():
        if key not in valid:
            raise bad(f"{name}.{key}" if name else key, value, f"unknown key; valid: {', '.join(valid)}")


def _class(name: str, table: Mapping[str, Any], base: ClassRate | None) -> ClassRate:
    if name not in CLASS_NAMES:
        raise bad(f"classes.{name}", dict(table), f"unknown failure class; valid: {', '.join(CLASS_NAMES)}")
    _keys(f"classes.{name}", table, CLASS_KEYS)
    fields = {"per_1000_node_days": 0.0} if base is None else {k: getattr(base, k) for k in CLASS_KEYS}
    return ClassRate(cls=FailureClass(name), **{**fields, **table})


def _classes(data: Mapping[str, Any], base: ReliabilityInputs) -> tuple[ClassRate, ...]:
    given = _table("classes", data.get("classes", {}))
    have = {c.cls.value: c for c in base.classes}
    out = {**have, **{n: _class(n, _table(f"classes.{n}", t), have.get(n)) for n, t in given.items()}}
    return tuple(out.values())


def _checkpoint(table: Mapping[str, Any], base: CheckpointPolicy) -> CheckpointPolicy:
    _keys("checkpoint", table, ("interval_s", "mode"))
    interval = table.get("interval_s", base.interval_s)
    mode = table.get("mode", base.mode.value)
    if mode not in MODES:
        raise bad("checkpoint.mode", mode, f"expected one of {', '.join(MODES)}")
    return CheckpointPolicy(interval_s=None if interval == "auto" else interval, mode=CheckpointMode(mode))


def _sub(cls: type, name: str, data: Mapping[str, Any], base: Any) -> Any:
    table = _table(name, data.get(name, {}))
    _keys(name, table, tuple(f.name for f in dataclasses.fields(cls)))
    return dataclasses.replace(base, **table)


def reliability_from_mapping(data: Mapping[str, Any], name: str = "custom") -> ReliabilityInputs:
    """Inputs from a parsed ``[reliability]`` table (module docstring)."""
    _keys("", data, TOP_KEYS)
    base = get_reliability(str(data["preset"])) if "preset" in data else ReliabilityInputs(name=name)
    scalars = {k: data[k] for k in ("spare_nodes", "seed", "samples", "weibull_shape", "pue", "price_per_kwh_usd")
               if k in data}
    return dataclasses.replace(
        base, name=name if "preset" not in data or len(data) > 1 else base.name, classes=_classes(data, base),
        restart=_sub(RestartCost, "restart", data, base.restart), storage=_sub(StorageSpec, "storage", data, base.storage),
        checkpoint=_checkpoint(_table("checkpoint", data.get("checkpoint", {})), base.checkpoint), **scalars)


def file_table(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``[reliability]`` table of a parsed TOML file, or None."""
    table = data.get("reliability")
    return None if table is None else _table("reliability", table)


def load_reliability(path: str | Path) -> ReliabilityInputs:
    """Inputs from a TOML file's ``[reliability]`` table; a file without one is an error."""
    def build(data: dict[str, Any]) -> ReliabilityInputs:
        table = file_table(data)
        if table is None:
            raise ValueError("no [reliability] table")
        return reliability_from_mapping(table, name=Path(path).stem)
    return load_toml(path, build)


def resolve_reliability(value: str | None, *files: str | None) -> ReliabilityInputs:
    """``--reliability`` (a preset name or a TOML file), else the first of ``files`` (job file,
    cluster file) with a ``[reliability]`` table, else the ``meta-rsc1`` preset."""
    if value is not None:
        is_file = value.endswith(".toml") or Path(value).is_file()
        return load_reliability(value) if is_file else get_reliability(value)
    for path in files:
        if path and str(path).endswith(".toml") and Path(path).is_file() and _has_table(path):
            return load_reliability(path)
    return get_reliability("meta-rsc1")


def _has_table(path: str) -> bool:
    return bool(load_toml(path, lambda data: file_table(data) is not None))
