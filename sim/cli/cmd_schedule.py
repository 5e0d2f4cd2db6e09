"""``trainsim schedule``: the schedule playground (unit costs, no model, no network)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from core.errors import invalid
from schedules.pipeline import build_schedule, schedule_names
from sim.cli.arg_types import check_output_paths, nonnegative_time, positive_int, unit_time
from sim.cli.output import print_json, print_table
from sim.job import CHUNKED_SCHEDULES, default_vpp
from sim.playground import PlaygroundResult, UnitCosts, bubble_row, run_playground
from sim.report.options import add_report_arguments, report_path
from sim.size_guard import check_size, estimate_playground, notice

CHUNKED = CHUNKED_SCHEDULES  # take --vpp, default 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``schedule`` subcommand."""
    p = sub.add_parser("schedule", help="schedule playground: action order, bubble, timeline",
                       description="Run pipeline schedules on an abstract pipeline with unit costs (per "
                                   "pipeline rank; with --vpp chunks, each chunk takes 1/vpp of them).")
    p.add_argument("--schedule", default="1f1b",
                   help=f"one or more, comma-separated, stacked in the report: {', '.join(schedule_names())}")
    p.add_argument("--pp", type=positive_int, default=4, help="pipeline ranks")
    p.add_argument("--microbatches", type=positive_int, default=8, help="micro-batches per step")
    p.add_argument("--vpp", type=positive_int, default=None, help=f"chunks per rank of {', '.join(CHUNKED)} (default 2)")
    p.add_argument("--fwd", type=unit_time, default=1.0, help="forward time per rank (the report's time unit)")
    p.add_argument("--bwd", type=unit_time, default=2.0, help="full backward time per rank")
    p.add_argument("--bwd-weight", type=nonnegative_time, default=1.0, help="weight-gradient part of --bwd (split schedules)")
    p.add_argument("--p2p", type=nonnegative_time, default=0.0, help="time of a pipeline send")
    p.add_argument("--json", action="store_true",
                   help="print JSON (one object, or a list for several schedules): bubble, step time, orders")
    add_report_arguments(p, "schedule.html")
    p.set_defaults(func=run)


def schedule_vpps(names: Sequence[str], vpp: int | None) -> list[int]:
    """Chunks per rank of each schedule: ``vpp`` for those that take chunks, else their default
    (``vpp`` 1 with one-chunk schedules only: what they run)."""
    if vpp is not None and vpp > 1 and not any(n in CHUNKED for n in names):
        raise invalid("vpp", vpp, f"none of {', '.join(names)} takes chunks; {', '.join(CHUNKED)} do")
    return [vpp if vpp is not None and n in CHUNKED else default_vpp(n) for n in names]


def schedule_list(text: str, field: str = "schedule") -> list[str]:
    """Comma-separated schedule names (flag ``field``), in order, each once."""
    names = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise invalid(field, text, f"give one or more of {', '.join(schedule_names())}")
    return names


def run(args: argparse.Namespace) -> int:
    """Build each schedule, simulate it, print orders and bubbles, draw the stacked timelines."""
    names = schedule_list(args.schedule)
    check_output_paths(args)
    vpps = schedule_vpps(names, args.vpp)
    estimate = estimate_playground(args.pp, args.microbatches, max(vpps), len(names))
    check_size(estimate, "--pp, --microbatches, --vpp or the number of --schedule")
    costs = UnitCosts(forward_s=args.fwd, backward_s=args.bwd, backward_weight_s=args.bwd_weight, p2p_s=args.p2p)
    schedules = [build_schedule(n, args.pp, args.microbatches, v)  # every schedule checked before any runs
                 for n, v in zip(names, vpps, strict=True)]
    notice(estimate)
    results = [run_playground(schedule, costs) for schedule in schedules]
    if args.json:
        docs = [r.summary() | {"orders": r.schedule.labels()} for r in results]
        print_json(docs[0] if len(docs) == 1 else docs)
    else:
        _print_human(results)
    path = report_path(args)
    if path is not None:
        # plotly: loaded by the runs that write a report
        from sim.report.playground import write_playground_report

        written = write_playground_report(results, path, args.plotly_js)
        if not args.json:
            print(f"timeline: {written}")
    return 0


def _print_human(results: Sequence[PlaygroundResult]) -> None:
    for r in results:
        s = r.schedule
        rows = [{"stage": rank, "actions": " ".join(order)} for rank, order in enumerate(s.labels())]
        print_table(f"{s.name}: pp={s.pp} m={s.microbatches} vpp={s.vpp}", rows)
    print_table("step time (units of --fwd/--bwd) and bubble fraction: measured, closed form",
                [bubble_row(r) for r in results])
