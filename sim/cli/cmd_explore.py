"""``trainsim explore``: sweep plans and cluster designs, rank by time and cost, draw the Pareto front."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.errors import invalid
from schedules.model import ModelSpec
from sim.cli.arg_types import check_output_paths, nonnegative_int, positive_int, worker_count
from sim.cli.explore_args import add_sweep_arguments, given_sweep_flags, spec_from_args
from sim.cli.output import print_json, print_table
from sim.explore.backends import make_backend
from sim.explore.designs import mixed_bases, price_basis, sized_cluster
from sim.explore.display import count_short, display_rows, usd
from sim.explore.failure_scaling import SCALING_FORMATS, failure_summary
from sim.explore.overview import describe_inputs, design_rows, run_inputs, shown_designs
from sim.explore.rank import TABLE_FORMATS, best_per_design, pareto_front, table_rows, to_verify
from sim.explore.spec import SweepSpec
from sim.explore.store import ResultStore
from sim.explore.sweep import SweepOutcome, run_sweep, sweep_model
from sim.report.options import add_plotly_js_argument


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``explore`` subcommand."""
    p = sub.add_parser("explore", help="sweep plans and cluster designs; rank by time and cost",
                       description="Enumerate every valid plan of each cluster design and GPU count, prune what "
                                   "cannot run or fit, time the rest, and rank by time and cost to train. "
                                   "Example: trainsim explore --model llama3-70b "
                                   "--cluster dgx-h100:512,dgx-a100:1024 --out sweep/")
    add_sweep_arguments(p)
    p.add_argument("--reliability", metavar="PRESET|FILE", help="rank by expected days and cost with failures, "
                   "checkpoints and restarts counted (sim.run presets or a [reliability] TOML), showing P10/P90")
    r = p.add_argument_group("running")
    r.add_argument("--out", help="sweep directory (results.jsonl/csv/json, report.html)")
    r.add_argument("--resume", metavar="DIR", help="continue the interrupted sweep in DIR (its spec.json)")
    r.add_argument("--workers", type=worker_count, help="local worker processes, 1-256 (default: one per core)")
    r.add_argument("--dask", metavar="ADDRESS", help="run on this Dask scheduler (pip install 'trainsim[distributed]')")
    r.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (pip install ray)")
    r.add_argument("--top", type=positive_int, default=3, help="best plans shown per design and GPU count (default 3)")
    r.add_argument("--verify", type=nonnegative_int, default=3,
                   help="plans re-run on the SimPy engine for the report: each design's fastest, then the next "
                        "fastest (default 3)")
    r.add_argument("--no-report", action="store_true", help="skip report.html and the engine re-runs")
    r.add_argument("--all-plans", action="store_true",
                   help="time every plan (default: skip plans whose step-time lower bound is above each design's "
                        "top plans; the best plans and the Pareto front are the same)")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    add_plotly_js_argument(r)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run or resume the sweep, then print and report."""
    check_output_paths(args)
    spec, out = _spec_and_out(args)
    backend = make_backend(args.workers, args.dask, args.ray)  # a cluster that does not answer: one line, first
    if not args.json:
        _print_inputs(spec, sweep_model(spec))
    with _progress_bar() as progress:
        keep = None if args.all_plans else max(args.top, args.verify, 3)  # 3: the report's best-plans table
        outcome = run_sweep(spec, out, backend, resume=bool(args.resume), progress=progress, keep=keep)
    failures = None
    if args.reliability is not None:
        from sim.explore.failures import failure_spec_note, with_failures
        from sim.run.reliability_file import resolve_reliability

        inputs = resolve_reliability(args.reliability)
        outcome = replace(outcome, rows=with_failures(outcome.rows, outcome.spec, outcome.plan.model, inputs))
        failures = failure_spec_note(inputs)
    # the report's module (plotly, pandas, the engine: ~0.25 s) is loaded by the runs that use it
    from sim.explore.report import check_on_engine, shown_checks, write_sweep_report

    checks = [] if args.no_report else check_on_engine(outcome, to_verify(outcome.rows, args.verify))
    files = {} if args.no_report else write_sweep_report(outcome, out, checks, plotly_js=args.plotly_js)
    summary = _summary(outcome, args.top, out, files) | (failure_summary(outcome.rows, failures) if failures else {})
    if args.json:
        print_json(summary | {"engine_check": [c.as_row() for c in checks]})
        return 0
    _print_human(outcome, summary, shown_checks(checks))
    return 0


def _spec_and_out(args: argparse.Namespace) -> tuple[SweepSpec, str]:
    if args.resume:
        given = given_sweep_flags(args)
        if given:
            raise invalid("resume", args.resume, f"the sweep is read from its spec.json; drop {', '.join(given)}")
        if args.out and args.out != args.resume:
            raise invalid("out", args.out, "--resume writes into the sweep's own directory; drop --out")
        return ResultStore(args.resume).read_spec(), args.resume
    spec = spec_from_args(args)
    if args.out is None:
        raise ValueError("explore needs --out DIR: the sweep directory (results, report.html)")
    return spec, args.out


def _print_inputs(spec: SweepSpec, model: ModelSpec) -> None:
    """The resolved run and designs, before any work."""
    print("explore " + describe_inputs(run_inputs(spec, model)))
    for design, gpus in spec.points():
        c = sized_cluster(design, gpus, spec.price_of(design))
        print(f"  {design} × {gpus} GPUs: {c.nodes} node{'s' if c.nodes > 1 else ''} of {c.gpus_per_node} "
              f"{c.device.name}, {usd(c.price_per_gpu_hour_usd)}/GPU-hour "
              f"({price_basis(design, spec.price_of(design), full=True)})")
    note = mixed_bases(spec.clusters, dict(spec.prices))
    if note:
        print(note)


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr (silent when stderr is not a terminal)."""
    console = Console(stderr=True)
    with Progress(TextColumn("evaluating plans"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("plans", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _summary(outcome: SweepOutcome, top: int, out: str, files: dict[str, Any]) -> dict[str, Any]:
    rows, plan = outcome.rows, outcome.plan
    return {
        "inputs": run_inputs(outcome.spec, plan.model),
        "designs": design_rows(outcome.spec, plan, rows),
        "evaluated": len(rows), "evaluated_this_run": outcome.evaluated, "resumed": outcome.resumed,
        "pruned": dict(sorted((k, v) for k, v in plan.pruned_total.items() if k != "evaluated")),
        "pruned_by_design": plan.pruned, "no_plan_left": plan.empty,
        "best": table_rows(best_per_design(rows, top)), "pareto": table_rows(pareto_front(rows)),
        "files": {"results_csv": str(Path(out) / "results.csv"), "results_json": str(Path(out) / "results.json"),
                  **{k: str(v) for k, v in files.items()}},
        "wall_s": round(outcome.wall_s, 3),
    }


def print_failure_scaling(rows: list[dict[str, Any]]) -> None:
    """The failure-aware scaling table (:mod:`sim.explore.failure_scaling`)."""
    print_table("with failures: days and dollars vs GPUs (the fewest expected days per size)",
                display_rows(rows, SCALING_FORMATS))


def _print_human(outcome: SweepOutcome, summary: dict[str, Any], checks: list[dict[str, Any]]) -> None:
    spec, rows = outcome.spec, outcome.rows
    print_table("designs: price per GPU-hour, fastest and cheapest plan", shown_designs(summary["designs"]))
    print_table(f"best plans per design ({spec.model}, {count_short(spec.tokens)} tokens, global batch "
                f"{spec.global_batch})",
                display_rows(summary["best"], TABLE_FORMATS))
    print_table("Pareto front (time vs cost, across designs)", display_rows(summary["pareto"], TABLE_FORMATS))
    print("step_80%: the measured step's 80% band from the residuals of comparable published runs (~: no comparable "
          "run, a rough guide); vs_fastest says 'slower' only when a design's band lies wholly above the fastest's "
          "(coverage: trainsim validate --published all)")
    if checks:
        print_table("top plans re-run on the SimPy engine", checks)
    pruned = ", ".join(f"{k}: {v:,}" for k, v in summary["pruned"].items())
    print(f"{summary['evaluated']:,} plans evaluated ({summary['evaluated_this_run']:,} now, {summary['resumed']:,} "
          f"resumed); pruned before simulating: {pruned or 'none'}")
    for key, why in summary["no_plan_left"].items():
        print(f"no plan left on {key}: {why}")
    if rows:
        from sim.explore.report import FAST_EVALUATOR_NOTE

        print("note: " + FAST_EVALUATOR_NOTE)
    if "failures" in summary:
        print_failure_scaling(summary["failure_scaling"])
        print("note: " + summary["failures"])
    print("files: " + ", ".join(summary["files"].values()), file=sys.stdout)
