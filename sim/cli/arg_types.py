"""Argparse value types shared by the commands: each refuses a bad value with argparse's one-line
error (exit 2), naming the value and what is valid; and a check of output paths before a run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from core.settings import NAME
from sim.atomic import OutputKind, check_output
from sim.report.options import report_path
from sim.report.plotly_js import PlotlyJs, bundle_name

MAX_UNIT_TIME = 1e6  # playground unit costs: a larger time is a typo, and overflows the report's axis
MAX_COUNT = 1_000_000_000


def _integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text} is invalid: expected an integer in [{lo}, {hi}]")
        return value
    parse.__name__ = "integer"
    return parse


positive_int = _integer(1, MAX_COUNT)
"""An integer in [1, 1e9]."""
nonnegative_int = _integer(0, MAX_COUNT)
"""An integer in [0, 1e9]."""
worker_count = _integer(1, 256)
"""Worker processes: 1 to 256."""


def _time(lo_open: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        ok = math.isfinite(value) and (0 < value if lo_open else 0 <= value) and value <= MAX_UNIT_TIME
        if not ok:
            raise argparse.ArgumentTypeError(
                f"{text} is invalid: expected a number in {'(' if lo_open else '['}0, {MAX_UNIT_TIME:g}]")
        return value
    parse.__name__ = "time"
    return parse


unit_time = _time(lo_open=True)
"""A playground time in (0, 1e6]: finite, positive."""
nonnegative_time = _time(lo_open=False)
"""A playground time in [0, 1e6]."""


def check_output_paths(args: argparse.Namespace, out: OutputKind = OutputKind.DIRECTORY) -> None:
    """Raise a one-line ValueError before any work when an output path (--report, --chrome-trace,
    --out: a directory unless ``out`` says otherwise) cannot be written: not a file name (too
    long, NUL), an existing FIFO, device, socket or directory where a file goes, a missing
    parent directory (:func:`sim.atomic.check_output`, the rule every writer follows)."""
    report = report_path(args) if hasattr(args, "report_default") else getattr(args, "report", None)
    paths = {"report": (report, OutputKind.FILE), "chrome_trace": (getattr(args, "chrome_trace", None), OutputKind.FILE),
             "out": (getattr(args, "out", None), out)}
    for flag, (path, kind) in paths.items():
        if path is None:
            continue
        shown = str(path) if len(str(path)) <= 60 else str(path)[:59] + "…"
        if not NAME.accepts(str(path)):
            raise ValueError(f"--{flag.replace('_', '-')}={shown!r} is invalid: {NAME.what}")
        check_output(path, f"--{flag.replace('_', '-')}", kind)
    if report is not None and getattr(args, "plotly_js", None) is not None:
        _check_bundle(Path(report), args.plotly_js)


def _check_bundle(report: Path, choice: PlotlyJs) -> None:
    """The plotly.js file the report loads from beside it (``assets``: in trainsim-assets/, which
    the writer may create) must be writable too."""
    name = bundle_name(choice)
    if name is None:
        return
    bundle, flag = report.parent / name, f"--plotly-js {choice.value}"
    if bundle.parent != report.parent:
        check_output(bundle.parent, flag, OutputKind.DIRECTORY)
    if bundle.parent.is_dir():
        check_output(bundle, flag)
