"""``trainsim compare``: the same job under several pipeline schedules, side by side."""

from __future__ import annotations

import argparse

from sim.cli.cmd_schedule import default_vpp
from sim.cli.job_args import add_job_arguments, job_from_args
from sim.cli.output import print_json, print_table, status
from sim.report.simulation import SUMMARY_KEYS, write_compare_report
from sim.simulate import simulate
from sim.summary import summarize


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = sub.add_parser("compare", help="simulate a job under several schedules, side by side")
    p.add_argument("--schedules", default="gpipe,1f1b,interleaved,zb-h1",
                   help="comma-separated schedules (default gpipe,1f1b,interleaved,zb-h1)")
    add_job_arguments(p, with_schedule=False)
    p.add_argument("--json", action="store_true", help="print a JSON list of simulate objects")
    p.add_argument("--report", default="compare.html", metavar="HTML", help="HTML report (default compare.html)")
    p.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate each schedule and print/draw them together."""
    names = [s.strip() for s in args.schedules.split(",") if s.strip()]
    if not names:
        raise ValueError(f"schedules={args.schedules!r} is invalid: give at least one schedule name")
    results = []
    for name in names:
        vpp = args.vpp if (args.vpp and default_vpp(name) > 1) else default_vpp(name)
        with status(f"simulating {name}…"):
            results.append(simulate(job_from_args(args, schedule=name, vpp=vpp)))
    summaries = [summarize(r) for r in results]
    if args.json:
        print_json(summaries)
    else:
        rows = [{"schedule": n, **{k: s[k] for k in SUMMARY_KEYS}} for n, s in zip(names, summaries, strict=True)]
        print_table("schedules compared", rows)
    if not args.no_report:
        path = write_compare_report(results, args.report)
        if not args.json:
            print(f"report: {path}")
    return 0
