"""Printing results: JSON (orjson, stable key order) or rich tables."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from sim.report.format import fmt_value


def print_json(obj: Any) -> None:
    """One JSON document on stdout, keys in insertion order, 2-space indent."""
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def print_table(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """A rich table on stdout."""
    if not rows:
        return
    cols = list(columns or rows[0].keys())
    table = Table(title=title, title_justify="left")
    for c in cols:
        table.add_column(c, justify="left" if c == cols[0] else "right")
    for r in rows:
        table.add_row(*(fmt_value(r.get(c, "")) for c in cols))
    _console().print(table)


def _console() -> Console:
    """stdout console; when stdout is not a terminal, wide enough that tables are not cut."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=240)


def print_pairs(title: str, pairs: Mapping[str, Any]) -> None:
    """A two-column (key, value) table."""
    print_table(title, [{"metric": k, "value": v} for k, v in pairs.items()], ["metric", "value"])


def status(message: str) -> Any:
    """A spinner on stderr while a long step runs (a no-op when stderr is not a terminal)."""
    return Console(stderr=True).status(message)
