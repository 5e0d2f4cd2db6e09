"""``trainsim critical-path``: the chain of work that sets a recorded run's step time."""

from __future__ import annotations

import argparse
from typing import Any

from profiler.commands.replay import add_run_arguments
from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_pairs, print_table, status
from sim.report.options import add_plotly_js_argument


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``critical-path`` subcommand."""
    p = sub.add_parser("critical-path", help="the chain of tasks that sets a recorded run's step time",
                       description=__doc__ + " Computed on the unchanged replay of the run (see `trainsim replay`).")
    add_run_arguments(p)
    p.add_argument("--rank", type=int, help="the rank whose step window to explain (default: the slowest)")
    p.add_argument("--step", type=int, help="the step label (default: the longest step)")
    p.add_argument("--top", type=int, default=10, help="longest pieces to list (default %(default)s)")
    p.add_argument("--report", metavar="HTML", help="write the replay report with the path highlighted")
    add_plotly_js_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay unchanged, walk the critical path back from the end of the step, print it."""
    from profiler.replay import critical_path, replay_run
    from profiler.replay.report import write_replay_report

    check_output_paths(args)
    with status("replaying…"):
        result = replay_run(args.run, all_steps=args.all_steps, allow_partial=args.allow_partial)
        cp = critical_path(result.model, result.base, rank=args.rank, step=args.step)
    summary: dict[str, Any] = {"run": str(args.run), **cp.summary(top=args.top), "notes": result.notes}
    if args.json:
        print_json(summary)
    else:
        print_pairs(f"critical path of rank {cp.rank}, step {cp.step} ({cp.step_time_s:.6g} s, "
                    f"{summary['segments']} pieces on ranks {', '.join(map(str, summary['ranks_on_path']))})",
                    {f"{k} share": v for k, v in summary["shares"].items()})
        print_table(f"longest {args.top} pieces", summary["longest"])
    if args.report:
        title = f"trainsim — critical path of {result.run_name}, rank {cp.rank} step {cp.step}"
        write_replay_report(result, cp, args.report, args.plotly_js, title=title)
    return 0
