"""Write output files atomically: to a temporary file beside the target, then rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers never see a half-written file."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | Path, text: str) -> Path:
    """UTF-8 text version of :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))
