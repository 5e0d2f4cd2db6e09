"""Printing results: JSON (orjson, stable key order) or rich tables."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from sim.report.format import fmt_value

if TYPE_CHECKING:  # rich is imported by what prints tables or a spinner, not by JSON output
    from rich.console import Console


def print_json(obj: Any) -> None:
    """One JSON document on stdout, keys in insertion order, 2-space indent."""
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def print_table(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """A rich table on stdout."""
    if not rows:
        return
    from rich.table import Table

    cols = list(columns or rows[0].keys())
    table = Table(title=title, title_justify="left")
    for c in cols:
        table.add_column(c, justify="left" if c == cols[0] else "right")
    for r in rows:
        table.add_row(*(fmt_value(r.get(c, "")) for c in cols))
    _console().print(table)


def _console() -> Console:
    """stdout console; when stdout is not a terminal, wide enough that tables are not cut."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=240)


def print_pairs(title: str, pairs: Mapping[str, Any]) -> None:
    """A two-column (key, value) table."""
    print_table(title, [{"metric": k, "value": v} for k, v in pairs.items()], ["metric", "value"])


def status(message: str) -> Any:
    """A spinner on stderr while a long step runs (a no-op when stderr is not a terminal)."""
    if not _may_be_terminal(sys.stderr):
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(message)


def _may_be_terminal(stream: Any) -> bool:
    """Could rich treat ``stream`` as a terminal (a tty, or forced by TTY_COMPATIBLE=1 or a
    non-empty FORCE_COLOR)? When not, its spinner would draw nothing."""
    forced = os.environ.get("TTY_COMPATIBLE") == "1" or bool(os.environ.get("FORCE_COLOR"))
    isatty = getattr(stream, "isatty", None)
    return forced or (isatty is not None and bool(isatty()))
