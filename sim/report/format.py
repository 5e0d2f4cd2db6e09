"""How a value reads in a table, in the terminal and in HTML alike (one wording everywhere)."""

from __future__ import annotations

from typing import Any


def fmt_value(value: Any) -> str:
    """Floats to 4 significant digits, booleans as yes/no, None as empty, the rest as str()."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def short_name(name: str, chars: int = 80) -> str:
    """A span's name for a hover box: at most ``chars`` characters (C++ kernel names run to 300+)."""
    return name if len(name) <= chars else name[:chars - 1] + "…"
