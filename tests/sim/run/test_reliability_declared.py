"""The ``[reliability]`` table is read from its declarations (sim.run.inputs): each key accepts
exactly the values its declared rule accepts, and refuses the others with a one-line error naming
the key and the value."""

from __future__ import annotations

import math
from typing import Any

import pytest

from core.settings import Declared, declared
from sim.run.inputs import ClassRate, ReliabilityInputs
from sim.run.reliability_file import DECLARATIONS, TABLES, TOP_KEYS, reliability_from_mapping

CANDIDATES: tuple[Any, ...] = (0, 1, 2, 9, 10, 2000, 100_000, 100_001, -1, 0.0, 0.5, 1.0, 1.5, 1e9, -0.5, math.inf,
                               math.nan, True, False, "x", "", "auto", "sync", "async", "memory")
SETTINGS = [(cls, d) for cls in DECLARATIONS for d in declared(cls)]


def _table(cls: type, key: str, value: Any) -> dict[str, Any]:
    """A ``[reliability]`` table that gives ``key`` of ``cls`` the value ``value``."""
    if cls is ReliabilityInputs:
        return {key: value}
    if cls is ClassRate:  # a slowing class, so that slowdown > 1 is valid on its own
        return {"classes": {"nvlink": {"kills_job": False, key: value} if key != "kills_job" else {key: value}}}
    return {next(name for name, t in TABLES.items() if t is cls): {key: value}}


@pytest.mark.parametrize("cls,setting", SETTINGS, ids=[f"{c.__name__}.{d.key}" for c, d in SETTINGS])
def test_a_key_accepts_what_its_declaration_accepts(cls: type, setting: Declared) -> None:
    for value in CANDIDATES:
        try:
            reliability_from_mapping(_table(cls, setting.key, value))
            accepted = True
        except ValueError as e:
            accepted = False
            assert f".{setting.key}=" in str(e) or str(e).startswith(f"reliability.{setting.key}="), str(e)
            assert len(str(e).splitlines()) == 1
        assert accepted == setting.rule.accepts(value), (setting.key, value)


def test_every_declared_key_is_a_valid_key() -> None:
    assert set(TOP_KEYS) == {"preset", "classes", *TABLES, *(d.key for d in declared(ReliabilityInputs))}
    assert {d.key for d in declared(ClassRate)} == {"per_1000_node_days", "kills_job", "detect_s", "repair_s",
                                                    "slowdown"}


def test_auto_interval_and_mode_are_held_as_the_field_types() -> None:
    inputs = reliability_from_mapping({"checkpoint": {"interval_s": "auto", "mode": "memory"}})
    assert inputs.checkpoint.interval_s is None and inputs.checkpoint.mode.value == "memory"
    assert reliability_from_mapping({"checkpoint": {"interval_s": 600}}).checkpoint.interval_s == 600
