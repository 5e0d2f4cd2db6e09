"""Read a TOML file into a config object, with every failure as one line prefixed by the path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import tomllib

T = TypeVar("T")


def load_toml(path: str | Path, build: Callable[[dict[str, Any]], T]) -> T:
    """``build`` applied to the parsed file; an unreadable file, invalid TOML or a ValueError
    from ``build`` becomes a one-line ValueError starting with ``path``."""
    path = Path(path)
    try:
        return build(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
