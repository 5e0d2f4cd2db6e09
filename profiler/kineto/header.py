"""Checks on a trace's header (the keys around ``traceEvents``) that stop the parse.

``distributedInfo`` is optional, but when present it must be an object whose ``rank`` is an
integer in [0, 2^20) and whose ``world_size`` is an integer in [1, 2^20] (a string rank is an
error, not a guess). Other header keys are read leniently where they are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_RANKS = 1 << 20
"""Largest world size accepted (about a million ranks)."""


def distributed_info(header: dict[str, Any], path: Path) -> dict[str, Any]:
    """``distributedInfo`` ({} when absent); ValueError (one line) when it is malformed."""
    if "distributedInfo" not in header:
        return {}
    info = header["distributedInfo"]
    if not isinstance(info, dict):
        raise ValueError(f"{path.name}: distributedInfo is {_short(info)}; expected an object "
                         "with rank and world_size")
    _check_int(info, "rank", 0, MAX_RANKS - 1, path)
    _check_int(info, "world_size", 1, MAX_RANKS, path)
    return info


def _check_int(info: dict[str, Any], key: str, lo: int, hi: int, path: Path) -> None:
    if key not in info:
        return
    value = info[key]
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{path.name}: distributedInfo.{key} is {_short(value)}; expected an "
                         f"integer in [{lo}, {hi}]")


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
