"""A recording's file names, and its atomic writes (the rule of :mod:`sim.atomic`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.atomic import is_temp_file, write_text_atomic

MANIFEST = "manifest.json"
ERRORS_DIR = "errors"
PIDS_DIR = "pids"


def trace_name(rank: int) -> str:
    """File name of a rank's gzipped Kineto trace."""
    return f"rank{rank}.json.gz"


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (sorted keys), atomically."""
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def remove_temp_files(directory: Path) -> list[Path]:
    """Delete the temporary files :mod:`sim.atomic` left in ``directory`` and its ``errors``
    subdirectory (a rank killed during its trace export leaves ``.rank0.json.gz.<8 hex>.tmp``,
    which no reader should see); returns what was removed."""
    removed = []
    for folder in (directory, directory / ERRORS_DIR):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.is_file() and is_temp_file(path):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
