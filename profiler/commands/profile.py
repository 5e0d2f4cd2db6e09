"""``trainsim profile``: run the included 3D-parallel trainer under torchrun and record it.

Writes ``rank<N>.json.gz`` (Kineto traces), ``manifest.json`` and ``launch.log`` into ``--out``,
which is replaced only when the run succeeds (a failed or interrupted run leaves it as it was and
keeps its partial recording in ``NAME.failed``). Ctrl-C or SIGTERM stops torchrun and every rank
and exits 130 or 143 with one line; a failed run exits 1 naming the rank that failed first.
``--print-launch`` prints the torchrun command for a multi-node GPU cluster instead of running.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from profiler.analysis import analyze_run
from profiler.launch import ProfileRun, launch_command, require_torch, run_profile
from profiler.trainer.args import add_train_arguments, config_from_args
from profiler.trainer.config import TrainConfig
from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_pairs

EXIT_RUN_FAILED = 1
_STEP_RE = re.compile(r"\[rank0\] step (\d+)/(\d+)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``profile`` subcommand."""
    p = sub.add_parser("profile", help="run and record the included 3D-parallel trainer",
                       description=__doc__)
    add_train_arguments(p)
    p.add_argument("--out", default="trainsim-profile", help="output directory")
    p.add_argument("--print-launch", action="store_true",
                   help="print the torchrun command for a multi-node cluster and exit")
    p.add_argument("--timeout", type=float, default=900.0, help="launch timeout in seconds")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validate flags, then print the launch command or run and summarise the recording."""
    config = config_from_args(args)
    if not args.timeout > 0:
        raise ValueError(f"timeout={args.timeout!r} is invalid: expected seconds > 0")
    if args.print_launch:
        print(launch_command(config, args.out))
        return 0
    check_output_paths(args)
    require_torch("trainsim profile")
    _check_device(config.device)
    result = _run_with_progress(config, Path(args.out), args.timeout)
    if not result.ok:
        print(f"trainsim profile: error: {result.failure()}", file=sys.stderr)
        if result.interrupted is not None:
            return 128 + int(result.interrupted)  # 130 for SIGINT, 143 for SIGTERM
        return EXIT_RUN_FAILED
    summary = summarize(result)
    if args.json:
        print_json(summary)
    else:
        print_pairs(f"recorded {config.world_size} ranks into {result.out_dir}", summary)
    return 0


def _check_device(device: str) -> None:
    """Fail early (exit 2) when CUDA is asked for but absent."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' is invalid: torch sees no CUDA device here "
                         "(use --print-launch to get the command for a GPU cluster)")


def _run_with_progress(config: TrainConfig, out_dir: Path, timeout_s: float) -> ProfileRun:
    """Run with a rich progress bar over the steps (rank 0's log lines) on stderr."""
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    console = Console(stderr=True)
    # off when stderr is not a terminal: rich would leave an empty line before the one-line error
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"profiling {config.world_size} ranks", total=config.total_steps)

        def on_line(line: str) -> None:
            match = _STEP_RE.search(line)
            if match:
                progress.update(task, completed=int(match.group(1)))

        return run_profile(config, out_dir, timeout_s=timeout_s, on_line=on_line)


def summarize(result: ProfileRun) -> dict[str, Any]:
    """Stable summary of a successful run."""
    manifest = result.manifest or {}
    profiled = manifest.get("profiled_steps", [])
    measured = analyze_run(result.out_dir).summary  # the measured step as analyze, validate and replay take it
    return {
        "out_dir": str(result.out_dir),
        "world_size": manifest.get("world_size"),
        "losses": [round(loss, 6) for loss in manifest.get("losses", [])],
        "profiled_steps": profiled,
        "step_time_s": measured["step_time_s"],
        "step_time_statistic": measured["step_time_statistic"],
        "trainer_step_time_s": measured["trainer_step_time_s"],
        "traces": len(result.traces),
        "trace_bytes": sum(path.stat().st_size for path in result.traces),
        "wall_time_s": round(result.wall_time_s, 2),
    }
