"""Validation helpers shared by the config dataclasses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def invalid(field: str, value: Any, valid: str) -> ValueError:
    """Build the one-line error used for every bad input: field, value, what is valid."""
    return ValueError(f"{field}={value!r} is invalid: {valid}")


def require_positive_int(field: str, value: Any) -> None:
    """Raise unless ``value`` is an int >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(field, value, "expected an integer >= 1")


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
