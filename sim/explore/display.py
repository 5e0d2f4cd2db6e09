"""How a sweep's numbers read in the terminal and the report (JSON keeps plain numbers).

Money is US dollars to 4 significant digits with thousands separators (``$707,300``), or short
(``$707K``, ``$1.05M``) on plot axes; durations on plot axes are minutes, hours or days.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SHORT_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
MANTISSAS: tuple[tuple[float, ...], ...] = ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5, 7), (1, 1.5, 2, 3, 4, 5, 7))


def sig(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def usd(value: float) -> str:
    """4 significant digits: ``$707,300`` (from $1,000: whole dollars), ``$12.29``, ``$1.50``
    (from $1: cents), ``$0.7261``."""
    v = sig(value)
    if abs(v) >= 1000:
        return f"${v:,.0f}"
    return f"${v:.2f}" if abs(v) >= 1 else f"${v:.4g}"


def usd_short(value: float) -> str:
    """``$707K``, ``$1.05M``, ``$12.3``: 3 significant digits with a K/M/B/T suffix."""
    for scale, suffix in SHORT_SUFFIXES:
        if abs(value) >= scale:
            return f"${sig(value / scale, 3):.3g}{suffix}"
    return f"${sig(value, 3):.3g}"


def count_short(value: float) -> str:
    """``1.17M``, ``602K``: 3 significant digits with a K/M/B/T suffix."""
    return usd_short(value)[1:]


def duration_days(days: float) -> str:
    """A duration given in days as ``45 min``, ``12 h``, ``9.9 d`` or ``1,500 d`` (3 significant digits)."""
    if days < 1 / 24:
        return f"{sig(days * 1440, 3):.3g} min"
    if days < 1:
        return f"{sig(days * 24, 3):.3g} h"
    return f"{sig(days, 3):,g} d"


def log_ticks(view: tuple[float, float], span: tuple[float, float] | None = None, most: int = 8) -> list[float]:
    """Tick values for a log axis over ``span`` (default ``view``): the densest of 1, 1-3, 1-2-5,
    1-2-3-5-7 and 1-1.5-2-3-4-5-7 per decade that puts at most ``most`` ticks inside ``view``."""
    chosen = MANTISSAS[0]
    for mantissas in MANTISSAS[1:]:
        if len(_ticks(view, mantissas)) > most:
            break
        chosen = mantissas
    return _ticks(span or view, chosen)


def _ticks(bounds: tuple[float, float], mantissas: tuple[float, ...]) -> list[float]:
    lo, hi = min(bounds), max(bounds)
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    return [sig(m * 10.0**e) for e in decades for m in mantissas if lo <= m * 10.0**e <= hi]


def yes_no(flag: bool) -> str:
    """``yes`` or ``no``."""
    return "yes" if flag else "no"


def display_rows(rows: Sequence[Mapping[str, Any]], formats: Mapping[str, Callable[[Any], str]]) -> list[dict[str, Any]]:
    """``rows`` with the values of the keys in ``formats`` turned into text."""
    return [{k: (formats[k](v) if k in formats and v is not None else v) for k, v in r.items()} for r in rows]
