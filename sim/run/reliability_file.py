"""The ``[reliability]`` TOML table (job files, cluster files, or a file of its own)::

    [reliability]
    preset = "meta-rsc1"        # start from a preset (default: no classes)
    spare_nodes = 16            # hot spares
    seed = 0                    # Monte Carlo seed; samples = runs simulated
    samples = 2000
    weibull_shape = 0.8         # optional: Weibull times between failures
    pue = 1.1                   # facility overhead on energy
    price_per_kwh_usd = 0.08
    [reliability.classes.gpu]   # one table per failure class (sim.run.inputs.FailureClass)
    per_1000_node_days = 3.0
    kills_job = true
    detect_s = 60
    repair_s = 14400
    [reliability.classes.nvlink]   # a failure that only slows a rank (sim.run.slow_ranks)
    per_1000_node_days = 1.0
    kills_job = false
    slowdown = 1.5              # the degraded GPU's compute takes 1.5 x a median GPU's
    detect_s = 1800             # runs slowed this long, then swapped at a planned restart
    [reliability.restart]
    init_s = 120
    [reliability.checkpoint]
    interval_s = "auto"         # seconds, or "auto"
    mode = "async"
    [reliability.storage]
    aggregate_GBps = 2000

Each key is a setting declared once on the record it sets (:mod:`sim.run.inputs`, with
:func:`core.settings.setting`): what it accepts, its default and its help come from there, as do
this reader's valid keys and the table's rows in the flag reference (``docs/flags.md``). A class
table replaces the given fields of the preset's class of that name. Unknown keys and classes and
invalid values are one-line errors naming the key, the value and what is valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, get_type_hints

from core.settings import Declared, declared
from sim.run.inputs import ClassRate, FailureClass, ReliabilityInputs, bad
from sim.run.presets import get_reliability
from topo.toml_file import load_toml

TABLES: Mapping[str, type] = {name: kind for name, kind in get_type_hints(ReliabilityInputs).items()
                              if isinstance(kind, type) and dataclasses.is_dataclass(kind)}
"""The sub-tables besides the classes (``[reliability.restart]``, ...): the fields of
:class:`ReliabilityInputs` that are records, each with its type (whose declared settings are the
table's keys)."""
NOT_SCALAR = ("preset", "classes", *TABLES)
TOP_KEYS = ("preset", *(d.key for d in declared(ReliabilityInputs)), "classes", *TABLES)
CLASS_NAMES = tuple(c.value for c in FailureClass)
DECLARATIONS = (ReliabilityInputs, ClassRate, *TABLES.values())
"""Where the table's settings are declared, in the order the flag reference lists them."""


def _table(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise bad(name, value, "expected a table")
    return value


def _keys(name: str, table: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    for key, value in table.items():
        if key not in valid:
            raise bad(f"{name}.{key}" if name else key, value, f"unknown key; valid: {', '.join(valid)}")


def _values(cls: type, name: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a table of ``cls``'s declared settings sets (checked when ``cls`` is built)."""
    settings = {d.key: d for d in declared(cls)}
    _keys(name, table, tuple(settings))
    return {settings[k].name: _field_value(settings[k], v) for k, v in table.items()}


def _field_value(setting: Declared, value: Any) -> Any:
    """A file's value as the field holds it: "auto" as None, a vocabulary's text as its enum."""
    if setting.spec.auto and value == "auto":
        return None
    if isinstance(setting.default, Enum) and setting.rule.accepts(value):
        return type(setting.default)(value)
    return value


def _class(name: str, table: Mapping[str, Any], base: ClassRate | None) -> ClassRate:
    if name not in CLASS_NAMES:
        raise bad(f"classes.{name}", dict(table), f"unknown failure class; valid: {', '.join(CLASS_NAMES)}")
    values = _values(ClassRate, f"classes.{name}", table)
    return dataclasses.replace(base or ClassRate(cls=FailureClass(name)), **values)


def _classes(data: Mapping[str, Any], base: ReliabilityInputs) -> tuple[ClassRate, ...]:
    given = _table("classes", data.get("classes", {}))
    have = {c.cls.value: c for c in base.classes}
    out = {**have, **{n: _class(n, _table(f"classes.{n}", t), have.get(n)) for n, t in given.items()}}
    return tuple(out.values())


def _sub(name: str, data: Mapping[str, Any], base: ReliabilityInputs) -> Any:
    values = _values(TABLES[name], name, _table(name, data.get(name, {})))
    return dataclasses.replace(getattr(base, name), **values)


def reliability_from_mapping(data: Mapping[str, Any], name: str = "custom") -> ReliabilityInputs:
    """Inputs from a parsed ``[reliability]`` table (module docstring)."""
    _keys("", data, TOP_KEYS)
    base = get_reliability(str(data["preset"])) if "preset" in data else ReliabilityInputs(name=name)
    scalars = _values(ReliabilityInputs, "", {k: v for k, v in data.items() if k not in NOT_SCALAR})
    return dataclasses.replace(
        base, name=name if "preset" not in data or len(data) > 1 else base.name, classes=_classes(data, base),
        **{t: _sub(t, data, base) for t in TABLES}, **scalars)


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
