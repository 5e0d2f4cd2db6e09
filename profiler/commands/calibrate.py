"""``trainsim calibrate``: fit a hardware profile from microbenchmarks and/or recorded runs.

    trainsim calibrate --microbench --out profiles/this-host.toml     # sweep this machine
    trainsim calibrate traces/runA traces/runB --out profiles/fit.toml  # fit from recorded runs
    trainsim calibrate --samples profiles/this-host.samples.json traces/calib-* --out p.toml

``--microbench`` keeps its measurements in ``<out>.samples.json``; ``--samples`` refits from such
a file without measuring again (the same samples and runs give the same profile, byte for byte).
Every fitted number is printed with its sample count and fit error, which the profile also keeps.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from profiler.calibrate.build import (
    build_profile,
    fit_rows,
    read_samples,
    samples_path,
    write_profile,
    write_samples,
)
from profiler.launch import require_torch
from profiler.trainer.files import MANIFEST
from sim.atomic import OutputKind, check_output
from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_table
from topo import get_cluster


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``calibrate`` subcommand."""
    p = sub.add_parser("calibrate", help="fit a hardware profile from microbenchmarks and/or runs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="recorded run directories to fit overheads from")
    p.add_argument("--microbench", action="store_true", help="run the GEMM and collective sweeps here")
    p.add_argument("--samples", help="refit from a samples file of an earlier --microbench")
    p.add_argument("--out", default="profiles/this-host.toml", help="profile to write (default %(default)s)")
    p.add_argument("--name", help="profile name (default: the file's stem)")
    p.add_argument("--cluster", default="cpu-host", help="cluster preset the profile calibrates")
    p.add_argument("--reps", type=int, default=7, help="timed repetitions per microbenchmark case")
    p.add_argument("--speed-reference", action="store_true",
                   help="record the one-rank runs' reference step times so that validate scales each "
                        "recording by the machine's speed then (off: measured on this VM, the correction "
                        "added more error than it removed)")
    p.add_argument("--json", action="store_true", help="print the fitted numbers as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measure and/or read samples, fit, write and print the profile."""
    if not (args.microbench or args.samples or args.runs):
        raise ValueError("nothing to calibrate from: give --microbench, --samples FILE or run directories")
    if args.microbench and args.samples:
        raise ValueError("give --microbench or --samples, not both")
    if args.reps < 1:
        raise ValueError(f"reps={args.reps} is invalid: expected an integer >= 1")
    get_cluster(args.cluster)  # unknown presets fail before any measuring
    if args.microbench:
        require_torch("trainsim calibrate --microbench")
    check_output_paths(args, out=OutputKind.FILE)
    if args.microbench:
        check_output(samples_path(Path(args.out)), "--out's samples file")
    seen: dict[Path, str] = {}  # each run's resolved directory -> how it was given first
    for path in args.runs:
        if not (Path(path) / MANIFEST).is_file():
            raise ValueError(f"{path}: not a recorded run (no {MANIFEST})")
        key = Path(path).resolve()
        if key in seen:
            also = "" if seen[key] == path else f" (also as {seen[key]})"
            raise ValueError(f"{path}: run given twice{also}: its samples would count double in the fit")
        seen[key] = path
    out = Path(args.out)
    bench = _measure(args.reps, out) if args.microbench else (read_samples(args.samples) if args.samples else None)
    try:
        profile = build_profile(name=args.name or out.stem, cluster=args.cluster, bench=bench, runs=args.runs,
                                speed_reference=args.speed_reference)
    except (KeyError, TypeError, AttributeError) as exc:
        if not args.samples:
            raise
        raise ValueError(f"{args.samples}: malformed microbenchmark samples ({type(exc).__name__}: {exc})") from None
    write_profile(profile, out)
    rows = fit_rows(profile)
    if args.json:
        print_json({"profile": str(out), "fits": rows})
    else:
        print_table(f"wrote {out}: fitted numbers (rel_error: median |model - measured| / measured)", rows)
    return 0


def _measure(reps: int, out: Path) -> dict[str, Any]:
    import torch  # noqa: F401  (before the progress bar: without torch, the error is the only line)

    from profiler.calibrate.microbench import run_microbench

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("microbenchmarks", total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        bench = run_microbench(reps=reps, on_progress=update)
    write_samples(bench, samples_path(out))
    return bench
