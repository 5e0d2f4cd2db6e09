"""Atomic file writes (temporary file in the same directory, then rename) and output names."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
ERRORS_DIR = "errors"
PIDS_DIR = "pids"


def trace_name(rank: int) -> str:
    """File name of a rank's gzipped Kineto trace."""
    return f"rank{rank}.json.gz"


def write_atomic(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same suffixes), then rename it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix="".join(path.suffixes),
                               dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (sorted keys), atomically."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"

    def write(tmp: Path) -> None:
        tmp.write_text(text)

    return write_atomic(path, write)


_TEMP_RE = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}(?P<suffixes>(?:\.[^.]+)*)")


def is_temp_file(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`write_atomic` (``.NAME.<8 random>SUFFIXES``,
    SUFFIXES those of NAME)."""
    match = _TEMP_RE.fullmatch(path.name)
    return match is not None and match["suffixes"] == "".join(Path(match["name"]).suffixes)


def remove_temp_files(directory: Path) -> list[Path]:
    """Delete the temporary files :func:`write_atomic` left in ``directory`` and its ``errors``
    subdirectory (a rank killed during its trace export leaves ``.rank0.json.gz.<random>.json.gz``,
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
