"""The one set of validation-error helpers every config and setting uses.

Every bad input raises ``ValueError`` with one line naming the field, the value (shortened when
long) and what is valid, e.g. ``plan.tp='four' is invalid: expected an integer in [1, 65536]``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any


def shorten(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters with an ellipsis (errors stay one short line)."""
    text = repr(value.value if isinstance(value, Enum) else value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def invalid(field: str, value: Any, valid: str) -> ValueError:
    """The one-line error used for every bad input: ``field=value is invalid: valid``."""
    return ValueError(f"{field}={shorten(value)} is invalid: {valid}")


def require_positive_int(field: str, value: Any) -> None:
    """Raise unless ``value`` is an int >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(field, value, "expected an integer >= 1")


def require_nonnegative_int(field: str, value: Any) -> None:
    """Raise unless ``value`` is an int >= 0 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(field, value, "expected an integer >= 0")


def require_number(field: str, value: Any, *, low: float = 0.0, high: float | None = None,
                   low_inclusive: bool = True) -> None:
    """Raise unless ``value`` is a finite real number in [low, high] (or (low, high] if not inclusive)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(value))
    if ok:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bracket = "[" if low_inclusive else "("
        upper = f"{high}]" if high is not None else "inf)"
        raise invalid(field, value, f"expected a number in {bracket}{low}, {upper}")


def require_choice(field: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise unless ``value`` is one of ``choices``."""
    options = list(choices)
    if value not in options:
        raise invalid(field, value, "expected one of " + ", ".join(map(str, options)))


class UnknownNameError(ValueError):
    """A registry lookup failed; the message lists the valid names."""


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> UnknownNameError:
    """Error for a registry lookup miss, listing the valid names."""
    return UnknownNameError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def replace_checked(spec: Any, overrides: Mapping[str, Any]) -> Any:
    """``dataclasses.replace(spec, **overrides)`` that names an unknown field and lists the valid ones.

    The replaced spec is validated again by its ``__post_init__``.
    """
    names = [f.name for f in dataclasses.fields(spec)]
    for key in overrides:
        if key not in names:
            kind = type(spec).__name__
            raise ValueError(f"unknown {kind} field {key!r}; valid: {', '.join(names)}")
    return dataclasses.replace(spec, **dict(overrides))
