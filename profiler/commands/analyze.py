"""``trainsim analyze``: the simulator's metrics and report, computed from measured traces."""

from __future__ import annotations

import argparse
from typing import Any

from sim.chrome_trace import write_chrome_trace
from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_pairs, print_table, status
from sim.report.options import add_plotly_js_argument


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``analyze`` subcommand."""
    p = sub.add_parser("analyze", help="metrics and report of a recorded run (torch.profiler traces)",
                       description="Parse one Kineto trace per rank (plain or gzipped JSON) and compute the same "
                                   "metrics as `simulate`, plus Holistic-Trace-Analysis-style per-rank figures.")
    p.add_argument("run", help="directory of per-rank traces (or one trace file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--report", metavar="HTML", help="write an HTML report of the measured timeline")
    add_plotly_js_argument(p)
    p.add_argument("--chrome-trace", metavar="JSON", help="write all ranks merged into one Chrome/Perfetto trace")
    p.add_argument("--all-steps", action="store_true",
                   help="keep the last profiler step (dropped by default, as HTA does)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Parse, measure, print; write the report / merged trace when asked."""
    from profiler.analysis import analyze_run, write_measured_report

    check_output_paths(args)
    with status("parsing traces…"):
        result = analyze_run(args.run, all_steps=args.all_steps)
    malformed = result.parsed.timeline.meta.malformed_events
    if malformed:  # absent when every event was well formed (output unchanged)
        result.summary["malformed_events"] = malformed
    if args.json:
        print_json(result.summary)
    else:
        _print_human(result.summary)
    if args.report:
        write_measured_report(result, args.report, args.plotly_js)
    if args.chrome_trace:
        write_chrome_trace(result.timeline, args.chrome_trace)
    return 0


def _print_human(s: dict[str, Any]) -> None:
    keys = [k for k in ("world_size", "step_time_s", "trainer_step_time_s", "tokens_per_s", "tflops_per_gpu",
                        "bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction") if s.get(k) is not None]
    label = {"step_time_s": f"step_time_s ({s['step_time_statistic']})"} if s.get("step_time_statistic") else {}
    print_pairs(f"measured run: {s['run']}", {label.get(k, k): s[k] for k in keys})
    print_table("per rank (HTA temporal breakdown)", s["ranks"])
    for w in s["warnings"]:
        print(f"warning: {w}")
    if s.get("malformed_events"):
        listing = ", ".join(f"{k} {n}" for k, n in s["malformed_events"].items())
        print(f"malformed events skipped: {listing}")
