"""``trainsim replay``: rebuild a recorded run as a task graph, replay it, and ask what-if."""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_table, status
from sim.report.options import add_plotly_js_argument

EPILOG = """knobs (repeatable):
  --scale TARGET=FACTOR   compute, gemm, attention, elementwise, fwd, bwd, bwd_input, bwd_weight,
                          optimizer, other, memcpy, host, waiting, comm, comm.<dim> or <dim> (tp pp dp cp),
                          comm.unmapped; prefix rank<R>. for one rank (rank<R> = its compute)
  --link TARGET:bandwidth=Fx | TARGET:latency=Fx | TARGET:latency=+SECONDS
                          TARGET: all, tp, pp, dp, cp, unmapped, intra, inter, pg:<name>
  --drop TARGET           the work takes no time (dropped communication no longer synchronises)
  --remove-straggler R|auto
examples:
  trainsim replay traces/dp4-zero3
  trainsim replay traces/tp2pp2dp2-interleaved --scale compute=0.5 --link dp:bandwidth=2x --report whatif.html
  trainsim replay traces/pp2-zbv --scale rank1=2 --json
"""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``replay`` and ``critical-path``."""
    p.add_argument("run", help="directory of per-rank traces (or one trace file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--all-steps", action="store_true", help="keep the last profiler step (dropped by default)")
    p.add_argument("--allow-partial", action="store_true",
                   help="replay even when most collectives find no peers (they run uncoupled)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``replay`` subcommand."""
    p = sub.add_parser("replay", help="replay a recorded run on the simulator's engine, with what-if knobs",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.add_argument("--scale", action="append", default=[], metavar="TARGET=FACTOR", help="scale durations")
    p.add_argument("--link", action="append", default=[], metavar="TARGET:PARAM=FACTOR",
                   help="scale a link's bandwidth or latency")
    p.add_argument("--drop", action="append", default=[], metavar="TARGET", help="make work take no time")
    p.add_argument("--remove-straggler", metavar="R|auto", help="bring a rank to its peers' median")
    p.add_argument("--gpus-per-node", type=int, default=8, help="ranks per node for intra/inter (GPU runs)")
    p.add_argument("--report", metavar="HTML", help="write measured/replayed/what-if timelines and the critical path")
    add_plotly_js_argument(p)
    p.set_defaults(func=run)


def whatif_from_args(args: argparse.Namespace) -> Any:
    """The :class:`WhatIf` of the flags (ValueError names the bad one)."""
    from profiler.replay.knobs import WhatIf, parse_link, parse_scale

    return WhatIf(scale=tuple(parse_scale(s) for s in args.scale), link=tuple(parse_link(s) for s in args.link),
                  drop=tuple(args.drop), remove_straggler=args.remove_straggler, gpus_per_node=args.gpus_per_node)


def run(args: argparse.Namespace) -> int:
    """Replay, print, write the report when asked."""
    from profiler.replay import critical_path, replay_run
    from profiler.replay.report import write_replay_report

    whatif = whatif_from_args(args)
    check_output_paths(args)
    with status("replaying…"):
        result = replay_run(args.run, whatif, all_steps=args.all_steps, allow_partial=args.allow_partial)
    summary = result.summary()
    if args.json:
        print_json(summary)
    else:
        _print_human(summary)
    if args.report:
        write_replay_report(result, critical_path(result.model, result.base), args.report, args.plotly_js)
    return 0


def _print_human(s: dict[str, Any]) -> None:
    title = f"replay of {s['run']}" + (f" with {' '.join(s['knobs'])}" if s["knobs"] else " (unchanged)")
    print_table(title + " — step time per rank (s)", s["ranks"])
    rows = [{"timeline": k, **v} for k, v in s["metrics"].items()]
    print_table(f"metrics (step_time_s: {s['step_time_statistic']} of the longest rank, as analyze)", rows)
    m = s["matching"]
    print(f"matched: {m['collectives_by_key']} collectives by key, {m['collectives_by_time']} by time, "
          f"{m['p2p_pairs']} p2p pairs; {m['unmatched_spans']} of {m['communication_spans']} communication spans uncoupled")
    for line in s["notes"]:
        print(f"note: {line}")
