"""The sweep directory: inputs, results as they come, and the final tables.

    spec.json      the SweepSpec (``--resume`` reads it back)
    results.jsonl  one row per evaluated plan, appended as units finish (keyed by plan id)
    results.csv    every evaluated plan, sorted by id (written at the end, atomically)
    results.json   {"spec", "pruned", "rows"} with the same rows (atomically)

A sweep killed mid-write leaves at most a partial last line in results.jsonl; reading ignores it
and the next append starts on a fresh line, so resuming recomputes only what is missing.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from sim.atomic import OutputKind, check_output, write_bytes_atomic, write_text_atomic
from sim.explore.rows import COLUMNS, well_formed
from sim.explore.spec import SweepSpec

SPEC, JSONL, CSV, JSON = "spec.json", "results.jsonl", "results.csv", "results.json"


class ResultStore:
    """Reads and writes one sweep directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = check_output(directory, "--out", OutputKind.DIRECTORY)

    # ---- spec ----
    def write_spec(self, spec: SweepSpec) -> None:
        """Create the sweep's directory (not its parents) and save the sweep's inputs (atomically)."""
        self.dir.mkdir(exist_ok=True)
        write_bytes_atomic(self.dir / SPEC, orjson.dumps(spec.to_dict(), option=orjson.OPT_INDENT_2))

    def read_spec(self) -> SweepSpec:
        """The saved inputs; a missing or bad file is a one-line ValueError."""
        path = self.dir / SPEC
        if not path.is_file():
            raise ValueError(f"resume={str(self.dir)!r} is invalid: no {SPEC} there (not a sweep directory)")
        try:
            return SweepSpec.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # e.g. a list where a table goes
            raise ValueError(f"{path}: not a sweep spec: {exc}") from None

    def has_spec(self) -> bool:
        """Whether the directory already holds a sweep."""
        return (self.dir / SPEC).is_file()

    # ---- rows as they come ----
    def read_rows(self) -> dict[str, dict[str, Any]]:
        """Rows already written, by plan id (a partial or corrupt line is skipped, and so is a row
        that is not :func:`sim.explore.rows.well_formed`: it is recomputed)."""
        path = self.dir / JSONL
        rows: dict[str, dict[str, Any]] = {}
        if not path.is_file():
            return rows
        for line in path.read_bytes().splitlines():
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if well_formed(row):
                rows[row["id"]] = row
        return rows

    def append_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows (one write, flushed to disk) after any partial last line."""
        data = b"".join(orjson.dumps(dict(r)) + b"\n" for r in rows)
        if not data:
            return
        self.dir.mkdir(exist_ok=True)
        path = self.dir / JSONL
        with open(path, "ab") as fh:
            if fh.tell() and not _ends_with_newline(path):
                fh.write(b"\n")
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    # ---- final tables ----
    def write_tables(self, spec: SweepSpec, pruned: Mapping[str, Any], rows: list[dict[str, Any]]) -> None:
        """results.csv and results.json of every row, sorted by plan id (atomically)."""
        ordered = sorted(rows, key=lambda r: r["id"])
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(ordered)
        write_text_atomic(self.dir / CSV, buf.getvalue())
        doc = {"spec": spec.to_dict(), "pruned": dict(pruned), "rows": ordered}
        write_bytes_atomic(self.dir / JSON, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
