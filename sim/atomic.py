"""Write output files atomically: to a temporary file beside the target, then rename.

Readers never see a half-written file, and an interrupted write leaves the old file (or none).
The file gets the mode a plain ``open(path, "w")`` would give it: 0666 minus the umask (0644
under the usual umask 022), not the 0600 of :func:`tempfile.mkstemp`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FILE_MODE = 0o666  # before the umask, as open() creates files


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` (parent directories created) via a temporary file and a rename."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | Path, text: str) -> Path:
    """UTF-8 text version of :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))
