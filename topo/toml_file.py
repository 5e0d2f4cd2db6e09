"""Read a TOML file into a config object, with every failure as one line prefixed by the path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import tomllib

T = TypeVar("T")


MAX_BYTES = 1 << 20  # a job, cluster or profile file is a few KB; larger files are refused


def load_toml(path: str | Path, build: Callable[[dict[str, Any]], T]) -> T:
    """``build`` applied to the parsed file; an unreadable file, a file over :data:`MAX_BYTES`,
    text that is not UTF-8, invalid TOML, nesting too deep for the parser or a ValueError
    from ``build`` becomes a one-line ValueError starting with ``path`` (shortened when long)."""
    path = Path(path)
    shown = str(path) if len(str(path)) <= 80 else str(path)[:79] + "…"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES // 1024} KiB: not a configuration file")
        text = raw.decode("utf-8")
        return build(tomllib.loads(text))
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

