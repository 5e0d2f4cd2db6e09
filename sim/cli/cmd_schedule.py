"""``trainsim schedule``: the schedule playground (unit costs, no model, no network)."""

from __future__ import annotations

import argparse

from schedules.pipeline import build_schedule, schedule_names
from sim.cli.output import print_json, print_table
from sim.playground import UnitCosts, run_playground
from sim.report.figures import timeline_figure
from sim.report.html import Report
from sim.summary import round_sig


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``schedule`` subcommand."""
    p = sub.add_parser("schedule", help="schedule playground: action order, bubble, timeline",
                       description="Run a pipeline schedule on an abstract pipeline with unit costs (per "
                                   "pipeline rank; with --vpp chunks, each chunk takes 1/vpp of them).")
    p.add_argument("--schedule", default="1f1b", help=f"one of {', '.join(schedule_names())}")
    p.add_argument("--pp", type=int, default=4, help="pipeline ranks")
    p.add_argument("--microbatches", type=int, default=8, help="micro-batches per step")
    p.add_argument("--vpp", type=int, default=None, help="chunks per rank (default 2 for interleaved/V schedules)")
    p.add_argument("--fwd", type=float, default=1.0, help="forward time per rank")
    p.add_argument("--bwd", type=float, default=2.0, help="full backward time per rank")
    p.add_argument("--bwd-weight", type=float, default=1.0, help="weight-gradient part of --bwd (split schedules)")
    p.add_argument("--p2p", type=float, default=0.0, help="time of a pipeline send")
    p.add_argument("--json", action="store_true", help="print JSON: bubble_fraction, step_time, orders")
    p.add_argument("--report", default="schedule.html", metavar="HTML", help="timeline HTML (default schedule.html)")
    p.add_argument("--no-report", action="store_true", help="do not write the HTML")
    p.set_defaults(func=run)


def default_vpp(schedule: str) -> int:
    """Chunks per rank a schedule runs with when --vpp is not given."""
    return 2 if schedule in ("interleaved", "dualpipev", "zbv", "interleaved-zb") else 1


def run(args: argparse.Namespace) -> int:
    """Build the schedule, simulate it, print orders and bubble, draw the timeline."""
    vpp = args.vpp if args.vpp is not None else default_vpp(args.schedule)
    schedule = build_schedule(args.schedule, args.pp, args.microbatches, vpp)
    costs = UnitCosts(forward_s=args.fwd, backward_s=args.bwd, backward_weight_s=args.bwd_weight, p2p_s=args.p2p)
    result = run_playground(schedule, costs)
    orders = schedule.labels()
    if args.json:
        print_json({"schedule": schedule.name, "pp": schedule.pp, "microbatches": schedule.microbatches,
                    "vpp": schedule.vpp, "bubble_fraction": round_sig(result.metrics.bubble_fraction),
                    "step_time": round_sig(result.metrics.step_time_s), "orders": orders})
    else:
        rows = [{"stage": r, "actions": " ".join(o)} for r, o in enumerate(orders)]
        print_table(f"{schedule.name}: pp={schedule.pp} m={schedule.microbatches} vpp={schedule.vpp}", rows)
        print(f"step time {result.metrics.step_time_s:.4g} (units of --fwd/--bwd), "
              f"bubble fraction {result.metrics.bubble_fraction:.4f}")
    if not args.no_report:
        rep = Report(f"trainsim schedule — {schedule.name}, pp={schedule.pp}, m={schedule.microbatches}, vpp={schedule.vpp}")
        rep.note(f"bubble fraction {result.metrics.bubble_fraction:.4f}; times in units of --fwd/--bwd (shown as ms).")
        rep.figure(timeline_figure(result.timeline, "Schedule timeline"))
        path = rep.write(args.report)
        if not args.json:
            print(f"timeline: {path}")
    return 0
