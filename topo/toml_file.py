"""Read a TOML file into a config object, with every failure as one line prefixed by the path.

Only a regular file (or a symlink to one) is read: a FIFO, a device, a socket or a directory is
refused before any byte is read (reading a FIFO would wait for a writer forever). A UTF-8 byte
order mark at the start (as some Windows editors write) is skipped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


MAX_BYTES = 1 << 20  # a job, cluster or profile file is a few KB; larger files are refused
BOM = "\ufeff"
_NODES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def node_kind(mode: int) -> str:
    """What a file-system node that is not a regular file is, from its ``st_mode``."""
    return next((name for test, name in _NODES if test(mode)), "a special file")


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise ValueError(f"it is {node_kind(mode)}, not a regular file: not read")


def read_regular(path: Path, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``path``; a ValueError, before reading, unless it is a regular file.
    Opened without blocking, so a FIFO without a writer does not wait."""
    _require_regular(os.stat(path).st_mode)  # a socket cannot even be opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _require_regular(os.fstat(fd).st_mode)  # what was opened, if the path changed meanwhile
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit)
    finally:
        os.close(fd)


def load_toml(path: str | Path, build: Callable[[dict[str, Any]], T]) -> T:
    """``build`` applied to the parsed file; an unreadable file, one that is not a regular file
    (:func:`read_regular`), a file over :data:`MAX_BYTES`, text that is not UTF-8, invalid TOML, nesting too deep for the parser or a ValueError
    from ``build`` becomes a one-line ValueError starting with ``path`` (shortened when long)."""
    import tomllib  # here: ~2 ms of every start, and a default `trainsim simulate` reads no TOML

    path = Path(path)
    shown = str(path) if len(str(path)) <= 80 else str(path)[:79] + "…"
    try:
        raw = read_regular(path, MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES // 1024} KiB: not a configuration file")
        text = raw.decode("utf-8")
        return build(tomllib.loads(text.removeprefix(BOM)))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{shown}: not valid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ValueError(f"{shown}: arrays or tables nested too deeply") from None
    except OSError as exc:
        raise ValueError(f"{shown}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{shown}: {' '.join(str(exc).split())}") from None

