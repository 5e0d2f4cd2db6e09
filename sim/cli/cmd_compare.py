"""``trainsim compare``: the same job under several pipeline schedules, side by side."""

from __future__ import annotations

import argparse

from schedules.pipeline import build_schedule
from sim.cli.arg_types import check_output_paths
from sim.cli.cmd_schedule import schedule_list, schedule_vpps
from sim.cli.fit_hint import fit_hint
from sim.cli.job_args import add_job_arguments, job_from_args, job_settings
from sim.cli.output import print_json, print_table, status
from sim.job import Job, describe_job
from sim.memory_summary import fits
from sim.microbatch_tuning import at_size, choice_json, choice_note, tune_microbatch, wants_auto
from sim.report.options import add_report_arguments, report_path
from sim.simulate import simulate
from sim.size_guard import JOB_REDUCE, SizeEstimate, check_size, estimate_job, notice
from sim.summary import SUMMARY_KEYS, summarize


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = sub.add_parser("compare", help="simulate a job under several schedules, side by side")
    p.add_argument("--schedules", default="gpipe,1f1b,interleaved,zb-h1",
                   help="comma-separated schedules (default gpipe,1f1b,interleaved,zb-h1)")
    add_job_arguments(p, with_schedule=False)
    p.add_argument("--json", action="store_true", help="print a JSON list of simulate objects")
    add_report_arguments(p, "compare.html")
    p.set_defaults(func=run)


def _band(summary: dict) -> str:  # type: ignore[type-arg]
    """A summary's ``error_band`` as ``low-high`` seconds (an em dash without one)."""
    band = summary["error_band"]
    return "—" if band["low_s"] is None else f"{band['low_s']:.4g}-{band['high_s']:.4g}"


def job_for(args: argparse.Namespace, schedule: str, vpp: int) -> Job:
    """The job the flags describe under ``schedule`` (with ``vpp`` chunks per rank)."""
    return job_from_args(args, schedule=schedule, vpp=vpp)


def run(args: argparse.Namespace) -> int:
    """Simulate each schedule and print/draw them together."""
    names = schedule_list(args.schedules, "schedules")
    jobs = [job_for(args, name, vpp) for name, vpp in zip(names, schedule_vpps(names, args.vpp), strict=True)]
    check_output_paths(args)
    estimates = [estimate_job(j) for j in jobs]  # every result is kept for the report: memory adds up
    total = SizeEstimate(tasks=sum(e.tasks for e in estimates), spans=sum(e.spans for e in estimates),
                         bytes=sum(e.bytes for e in estimates), seconds=sum(e.seconds for e in estimates))
    check_size(total, JOB_REDUCE + ", or compare fewer --schedules")
    for job in jobs:  # every schedule checked (e.g. dualpipev's micro-batch minimum) before any is simulated
        build_schedule(job.plan.schedule, job.plan.pp, job.plan.num_microbatches, job.plan.vpp)
    notice(total, "this comparison")
    note = None
    if wants_auto(job_settings(args)):  # one size for every schedule: the rule's choice on the first
        with status("choosing the micro-batch size…"):
            chosen, sizes = tune_microbatch(jobs[0], simulate, lambda r: r.metrics.step_time_s, fits, jobs[1:])
        size = chosen.job.plan.microbatch_size
        jobs = [at_size(j, size) or j for j in jobs]
        note = choice_note(size, sizes) + f", chosen under {names[0]} for every schedule"
    if not args.json:
        print(describe_job(jobs[0], schedule=",".join(names)))
        if note is not None:
            print(note)
    results = []
    for name, job in zip(names, jobs, strict=True):
        with status(f"simulating {name}…"):
            results.append(simulate(job))
    summaries = [summarize(r) for r in results]
    if note is not None:
        for summary in summaries:
            summary["microbatch_size_auto"] = choice_json(jobs[0].plan.microbatch_size, sizes,
                                                          f"the fastest that fits under {names[0]}")
    if args.json:
        print_json(summaries)
    else:
        rows = [{"schedule": n, **{k: s[k] for k in SUMMARY_KEYS}, "step_80%": _band(s)}
                for n, s in zip(names, summaries, strict=True)]
        plan = results[0].job.plan
        print_table(f"schedules compared ({plan.num_microbatches} micro-batches per pipeline)", rows)
        print(f"step_80%: the measured step's 80% band ({summaries[0]['error_band']['basis']}): the absolute "
              "step's error; schedules of one job share most of it, so their differences are surer than the bands")
        least = min(zip(names, summaries, strict=True), key=lambda ns: ns[1]["memory_timeline"]["peak_gib"])
        hint = fit_hint(least[1])
        if hint is not None:  # no schedule fits: what to change, for the one nearest to fitting
            print(f"no schedule fits; {least[0]}, the nearest: {hint}")
    path = report_path(args)
    if path is not None:
        # plotly: loaded by the runs that write a report
        from sim.report.simulation import write_compare_report

        written = write_compare_report(results, path, args.plotly_js)
        if not args.json:
            print(f"report: {written}")
    return 0
