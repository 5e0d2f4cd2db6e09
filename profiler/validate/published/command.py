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

from profiler.validate.published.band_rows import (
    coverage_object,
    coverage_rows,
    coverage_tables,
    residuals_of,
)
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
from profiler.validate.published.rows import (
    CALIBRATION_FILES,
    REPO,
    PublishedRow,
    default_file,
    read_rows,
)
from profiler.validate.published.run import MFU_DEFINITION, RowResult, validate_rows
from profiler.validate.published.summary import summarize
from sim.accuracy.residuals import RESIDUALS_FILE, Residual, residuals_json
from sim.atomic import write_text_atomic
from sim.cli.output import print_json, print_table

# Flags of ``trainsim validate`` that recorded runs use and --published does not.
OTHER_FLAGS = ("run", "suite", "calibration", "runs", "record", "profile", "no_profile", "cluster", "classes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--published`` flags of ``trainsim validate``."""
    p.add_argument("--published", nargs="?", const="", metavar="FILE",
                   help="simulate every run of a published-runs file and compare (default FILE: the "
                        "repository's dense calibration set, docs/published-runs.toml; also "
                        "docs/published-fp8-runs.toml and docs/published-moe-runs.toml; 'all': the "
                        "three, then the error band's leave-one-source-out coverage)")
    p.add_argument("--update-band", action="store_true",
                   help="with --published all: write the residual table the error band rests on "
                        "(sim/accuracy/residuals.json) from this run")
    p.add_argument("--timings", action="store_true",
                   help="with --published: add each row's simulation wall time (sim_wall_s in --json, wall_s in the table; it differs between runs)")


def run_published(args: argparse.Namespace) -> int:
    """Simulate the file's rows (or every calibration file's); print the tables (or JSON) and
    write the report."""
    given = ["a run directory" if f == "run" else f"--{f.replace('_', '-')}" for f in OTHER_FLAGS
             if getattr(args, f, None)]
    if given:
        raise ValueError(f"--published does not combine with {', '.join(given)}")
    every = args.published == ALL
    if args.update_band and not every:
        raise ValueError(f"--update-band needs --published {ALL}: the band rests on every calibration file")
    paths = list(CALIBRATION_FILES) if every else [Path(args.published) if args.published else default_file()]
    files = [(args.published if args.published and not every else os.path.relpath(p, REPO), read_rows(p))
             for p in paths]
    runs = [(shown, _validate(rows)) for shown, rows in files]
    if args.report:
        write_report(runs[0][1], summarize(runs[0][1]), args.report, runs[0][0])
    residuals = [res for _, results in runs for res in residuals_of(results)]
    if args.update_band:
        write_text_atomic(RESIDUALS_FILE, residuals_json(residuals, [shown for shown, _ in runs]))
    if args.json:
        objects = [json_object(results, summarize(results), shown, timings=args.timings) for shown, results in runs]
        print_json({"files": objects, "band_coverage": coverage_object(coverage_tables(residuals))}
                   if every else objects[0])
        return 0
    for shown, results in runs:
        _print_file(shown, results, args.timings)
    if every:
        _print_coverage(residuals)
    return 0


ALL = "all"


def _validate(rows: list[PublishedRow]) -> list[RowResult]:
    with _progress(len(rows)) as on_row:
        return validate_rows(rows, on_row)


def _print_file(shown: str, results: list[RowResult], timings: bool) -> None:
    summary = summarize(results)
    print_table(f"{shown}: measured vs simulated step time (err = (sim - measured) / measured; mfu: the "
                "simulator's definition, pub_mfu: the source's; fits: the simulated peak fits HBM)",
                table_rows(results, timings=timings))
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


def _print_coverage(residuals: list[Residual]) -> None:
    """The error band's leave-one-source-out coverage (sim.accuracy.coverage)."""
    for name, table in coverage_tables(residuals).items():
        print_table(f"80% error band, leave-one-source-out: measured steps inside their band, by {name}",
                    coverage_rows(table))


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
