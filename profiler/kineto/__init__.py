"""Kineto (torch.profiler) Chrome-trace parsing into trainsim's measured Timeline.

Entry point: :func:`load_run` (a directory of per-rank traces -> :class:`ParsedRun`).
Never imports torch: parsing needs only orjson, numpy and pandas. Exports are resolved lazily
so that parser worker processes import only what parsing one file needs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler.kineto.parsed import ParsedRun
    from profiler.kineto.run import find_trace_files, load_run

_EXPORTS = {"ParsedRun": "profiler.kineto.parsed", "find_trace_files": "profiler.kineto.run",
            "load_run": "profiler.kineto.run"}
__all__ = ["ParsedRun", "find_trace_files", "load_run"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'profiler.kineto' has no attribute {name!r}")
