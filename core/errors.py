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


def require_bool(field: str, value: Any) -> None:
    """Raise unless ``value`` is True or False (0 and 1 are rejected: a typo, not a switch)."""
    if not isinstance(value, bool):
        raise invalid(field, value, "expected true or false")


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


def build_checked(cls: Any, fields: Any, where: str) -> Any:
    """``cls(**fields)`` for a dataclass read from a file: a non-mapping, an unknown key or a
    missing required key is one ValueError naming ``where`` (the field's path) and the valid keys;
    the values are checked by ``cls``'s own ``__post_init__``, whose errors are named under
    ``where`` too (``causal=1`` -> ``config.model.causal=1``)."""
    if not isinstance(fields, Mapping):
        raise invalid(where, fields, f"expected a table of {cls.__name__} fields")
    known = dataclasses.fields(cls)
    names = [f.name for f in known]
    for key in fields:
        if key not in names:
            raise ValueError(f"{where}.{key} is not a {cls.__name__} field; valid: {', '.join(names)}")
    missing = [f.name for f in known if f.name not in fields and f.init
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}.{missing[0]} is missing: a {cls.__name__} needs {', '.join(missing)}")
    try:
        return cls(**dict(fields))
    except ValueError as exc:
        raise named_under(where, exc) from None


def named_under(path: str, exc: ValueError) -> ValueError:
    """``exc`` with the field it starts with named under ``path`` (``tp=0 is invalid`` ->
    ``config.tp=0 is invalid``); other messages unchanged."""
    text = str(exc)
    head = text.split(" ", 1)[0].split("=", 1)[0]
    if head and all(part.isidentifier() for part in head.split(".")) and text[len(head):len(head) + 1] in ("=", " "):
        return ValueError(f"{path}.{text}")
    return ValueError(text)


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
