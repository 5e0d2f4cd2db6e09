"""``trainsim simulate``: one job -> summary (table or JSON), HTML report, Chrome trace."""

from __future__ import annotations

import argparse

from sim.accuracy.summary import band_text
from sim.cli.arg_types import check_output_paths
from sim.cli.fit_hint import fit_hint
from sim.cli.job_args import add_job_arguments, job_settings
from sim.cli.output import print_json, print_pairs, print_table, status
from sim.job import DEFAULT_JOB, describe_job, resolve_job
from sim.memory_summary import fits
from sim.microbatch_tuning import choice_json, choice_note, tune_microbatch, wants_auto
from sim.report.options import add_report_arguments, report_path
from sim.run.cli_args import add_run_arguments, run_inputs, wants_run
from sim.run.display import print_run
from sim.simulate import simulate
from sim.size_guard import guard_job
from sim.summary import summarize


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser("simulate", help="simulate training steps of a job",
                       description="Simulate a training step. With no arguments: an embedded default job "
                                   "(Llama-3 8B, 2 DGX H100 nodes, TP4 PP2 DP2, 1F1B, 16 micro-batches of 1 "
                                   "per pipeline); flags change the settings they name and keep the rest.")
    add_job_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    add_report_arguments(p, "report.html")
    p.add_argument("--chrome-trace", metavar="JSON", help="also write a Chrome/Perfetto trace")
    add_run_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate, print, and write the requested files."""
    settings = job_settings(args)
    job = resolve_job(settings, defaults=DEFAULT_JOB)
    check_output_paths(args)
    guard_job(job)
    inputs = run_inputs(args) if wants_run(args) else None
    choice = None
    if wants_auto(settings):
        with status("choosing the micro-batch size…"):
            choice, sizes = tune_microbatch(job, simulate, lambda r: r.metrics.step_time_s, fits)
        job, result = choice.job, choice.result
    if not args.json:
        print(describe_job(job))
        if choice is not None:
            print(choice_note(job.plan.microbatch_size, sizes))
    if choice is None:
        with status("simulating…"):
            result = simulate(job)
    summary = summarize(result)
    if choice is not None:
        summary["microbatch_size_auto"] = choice_json(job.plan.microbatch_size, sizes)
    run_level = None
    if inputs is not None:
        from sim.run.predict import predict_run

        run_level = predict_run(result, *inputs)
        summary["run"] = run_level.json
    if args.json:
        print_json(summary)
    else:
        _print_human(summary)
    if (path := report_path(args)) is not None:
        from sim.report.simulation import write_simulation_report  # plotly: only for a report

        write_simulation_report(result, path, args.plotly_js, run_level)
        if not args.json:
            print(f"report: {path}")
    if args.chrome_trace:
        from sim.chrome_trace import write_chrome_trace

        write_chrome_trace(result.timeline, args.chrome_trace)
    return 0


def _print_human(summary: dict) -> None:  # type: ignore[type-arg]
    keys = ("world_size", "num_params", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "bubble_fraction",
            "exposed_comm_fraction", "comm_overlap_fraction", "peak_memory_gib", "fits", "cost_per_step_usd")
    print_pairs("simulated step", {k: summary[k] for k in keys})
    print(band_text(summary["error_band"], summary["step_time_s"]))
    timeline = summary["memory_timeline"]
    at_peak = timeline.get("at_peak_gib")
    if at_peak:
        print_table(f"HBM at the peak instant, rank {timeline['rank']} (GiB; sums to peak_memory_gib)", [at_peak])
    else:
        print_table("memory of the most loaded GPU (GiB)", [summary["memory_gib"]])
    hint = fit_hint(summary)
    if hint is not None:
        print(hint)
    if "run" in summary:
        print_run(summary["run"])
    print("approximate model: " + "; ".join(summary["simulation"]["approximations"][:1]) + " (see report)")
