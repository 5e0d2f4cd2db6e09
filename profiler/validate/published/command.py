"""``trainsim validate --published [FILE]``: print (or write) the comparison with published runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from profiler.validate.published.output import (
    family_rows,
    json_object,
    legend_lines,
    memory_rows,
    pair_line,
    pair_rows,
    summary_line,
    table_rows,
)
from profiler.validate.published.pairs import pair_results
from profiler.validate.published.report import write_report
from profiler.validate.published.rows import REPO, default_file, read_rows
from profiler.validate.published.run import MFU_DEFINITION, validate_rows
from profiler.validate.published.summary import summarize
from sim.cli.output import print_json, print_table

# Flags of ``trainsim validate`` that recorded runs use and --published does not.
OTHER_FLAGS = ("run", "suite", "calibration", "runs", "record", "profile", "no_profile", "cluster", "classes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--published`` flags of ``trainsim validate``."""
    p.add_argument("--published", nargs="?", const="", metavar="FILE",
                   help="simulate every run of a published-runs file and compare (default FILE: the "
                        "repository's dense calibration set, docs/published-runs.toml; also "
                        "docs/published-fp8-runs.toml and docs/published-moe-runs.toml)")
    p.add_argument("--timings", action="store_true",
                   help="with --published: add each row's simulation wall time (sim_wall_s in --json, wall_s in the table; it differs between runs)")


def run_published(args: argparse.Namespace) -> int:
    """Simulate the file's rows; print the table (or JSON) and write the report."""
    given = ["a run directory" if f == "run" else f"--{f.replace('_', '-')}" for f in OTHER_FLAGS
             if getattr(args, f, None)]
    if given:
        raise ValueError(f"--published does not combine with {', '.join(given)}")
    path = Path(args.published) if args.published else default_file()
    shown = args.published or os.path.relpath(path, REPO)
    rows = read_rows(path)
    with _progress(len(rows)) as on_row:
        results = validate_rows(rows, on_row)
    summary = summarize(results)
    if args.report:
        write_report(results, summary, args.report, shown)
    if args.json:
        print_json(json_object(results, summary, shown, timings=args.timings))
        return 0
    print_table(f"{shown}: measured vs simulated step time (err = (sim - measured) / measured; mfu: the "
                "simulator's definition, pub_mfu: the source's; fits: the simulated peak fits HBM)",
                table_rows(results, timings=args.timings))
    print_table("peak memory per GPU (GiB; sim_gib in the measured kind: reserved = the allocator's per-stream pools "
                "each at its peak, summed, sim.memory_pools; allocated = the memory timeline's peak)", memory_rows(results))
    for r in results:
        if r.skipped:
            print(f"skipped {r.row.name}: {r.reason}")
    print(summary_line(summary))
    print_table("by family", family_rows(summary))
    pairs = pair_results(results)
    if pairs:
        print_table("FP8/BF16 pairs: FP8 speedup = FP8 tokens/s / BF16 tokens/s (simulated: of the twins as "
                    "simulated; ratio-only twins at their tuned batch and checkpointing)", pair_rows(pairs))
        print(pair_line(pairs))
    print("assumed = unstated setting run with a default; approx = stated setting run as the nearest plan:")
    for line in legend_lines(results):
        print(f"  {line}")
    print(f"mfu = {MFU_DEFINITION}")
    return 0


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int, int, str], None] | None]:
    """Row i/N and its name on stderr when stderr is a terminal (nothing otherwise)."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("published runs", total=total)

        def on_row(i: int, n: int, name: str) -> None:
            progress.update(task, completed=i - 1, description=f"row {i}/{n} {name}")

        yield on_row
