"""``trainsim explore``: sweep plans and cluster designs, rank by time and cost, draw the Pareto front."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from schedules.errors import invalid
from schedules.model import get_model
from sim.cli.output import print_json, print_table
from sim.explore.backends import make_backend
from sim.explore.designs import parse_clusters, parse_price
from sim.explore.rank import best_per_design, pareto_front, ranked, table_rows
from sim.explore.report import FAST_EVALUATOR_NOTE, check_on_engine, write_sweep_report
from sim.explore.spec import DEFAULT_SCHEDULES, SearchSpace, SweepSpec
from sim.explore.sweep import SweepOutcome, run_sweep
from sim.report.options import add_plotly_js_argument

SWEEP_FLAGS = ("model", "tokens", "global_batch", "clusters", "gpus", "price", "seq_len", "tp", "pp", "cp", "vpp",
               "schedules", "zero", "microbatch_sizes", "sequence_parallel", "recompute", "uneven_stages", "dtype")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``explore`` subcommand."""
    p = sub.add_parser("explore", help="sweep plans and cluster designs; rank by time and cost",
                       description="Enumerate every valid plan of each cluster design and GPU count, prune what "
                                   "cannot run or fit, time the rest, and rank by time and cost to train.")
    s = p.add_argument_group("the training run and the designs")
    s.add_argument("--model", help="model preset (see `trainsim presets`)")
    s.add_argument("--seq-len", type=int, help="sequence length override (tokens)")
    s.add_argument("--tokens", type=float, help="tokens to train on, e.g. 1e12")
    s.add_argument("--global-batch", type=int, help="sequences per optimizer step (fixed for every plan)")
    s.add_argument("--clusters", help="comma-separated cluster presets or TOML files, e.g. dgx-h100,aws-p5")
    s.add_argument("--gpus", help="comma-separated GPU counts, e.g. 256,512,1024")
    s.add_argument("--price", action="append", metavar="NAME=USD/UNIT",
                   help="price override, e.g. aws-p5=98.32/node-hour or dgx-h100=2.5/gpu-hour (repeatable)")
    g = p.add_argument_group("plan space (default: see the README's 'Explore a cluster design')")
    for flag, text in (("--tp", "tensor-parallel degrees"), ("--pp", "pipeline degrees"), ("--cp", "context-parallel degrees"),
                       ("--vpp", "chunks per rank for interleaved schedules"), ("--zero", "ZeRO stages"),
                       ("--microbatch-sizes", "micro-batch sizes")):
        g.add_argument(flag, help=f"comma-separated {text}")
    g.add_argument("--schedules", help=f"comma-separated pipeline schedules (default {','.join(DEFAULT_SCHEDULES)})")
    g.add_argument("--sequence-parallel", help="on, off or on,off (default on; off when tp = 1)")
    g.add_argument("--recompute", help="comma-separated: none, selective, full (default none,full)")
    g.add_argument("--uneven-stages", action="store_true", default=None, help="also try pp that does not divide the layers")
    g.add_argument("--dtype", choices=("bf16", "fp8"), help="matmul dtype (default bf16)")
    r = p.add_argument_group("running")
    r.add_argument("--out", help="sweep directory (results.jsonl/csv/json, report.html)")
    r.add_argument("--resume", metavar="DIR", help="continue the interrupted sweep in DIR (its spec.json)")
    r.add_argument("--workers", type=int, help="local worker processes (default: one per core)")
    r.add_argument("--dask", metavar="ADDRESS", help="run on this Dask scheduler (pip install 'trainsim[distributed]')")
    r.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (pip install ray)")
    r.add_argument("--top", type=int, default=3, help="best plans shown per design and GPU count (default 3)")
    r.add_argument("--verify", type=int, default=3, help="top plans re-run on the SimPy engine for the report (default 3)")
    r.add_argument("--no-report", action="store_true", help="skip report.html and the engine re-runs")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    add_plotly_js_argument(r)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run or resume the sweep, then print and report."""
    spec, out = _spec_and_out(args)
    backend = make_backend(args.workers, args.dask, args.ray)
    with _progress_bar() as progress:
        outcome = run_sweep(spec, out, backend, resume=bool(args.resume), progress=progress)
    checks = [] if args.no_report else check_on_engine(outcome, ranked(outcome.rows)[:max(0, args.verify)])
    files = {} if args.no_report else write_sweep_report(outcome, out, checks, plotly_js=args.plotly_js)
    summary = _summary(outcome, args.top, out, files)
    if args.json:
        print_json(summary | {"engine_check": [c.as_row() for c in checks]})
        return 0
    _print_human(outcome, summary, [c.as_row() for c in checks])
    return 0


def _spec_and_out(args: argparse.Namespace) -> tuple[SweepSpec | None, str]:
    if args.resume:
        given = [f"--{f.replace('_', '-')}" for f in SWEEP_FLAGS if getattr(args, f) is not None]
        if given:
            raise invalid("resume", args.resume, f"the sweep is read from its spec.json; drop {', '.join(given)}")
        if args.out and args.out != args.resume:
            raise invalid("out", args.out, "--resume writes into the sweep's own directory; drop --out")
        return None, args.resume
    missing = [f"--{f.replace('_', '-')}" for f in ("model", "tokens", "global_batch", "clusters", "gpus", "out")
               if getattr(args, f) is None]
    if missing:
        raise ValueError(f"explore needs {', '.join(missing)} (or --resume DIR)")
    clusters = parse_clusters(args.clusters)
    spec = SweepSpec(model=args.model, tokens=args.tokens, global_batch=args.global_batch, clusters=clusters,
                     gpus=_ints("gpus", args.gpus), seq_len=args.seq_len,
                     prices=tuple(parse_price(p, clusters) for p in args.price or ()), space=_space(args))
    get_model(args.model)  # an unknown name lists the valid ones before any work
    return spec, args.out


def _space(args: argparse.Namespace) -> SearchSpace:
    fields: dict[str, Any] = {}
    for name in ("tp", "pp", "cp", "vpp", "zero", "microbatch_sizes"):
        if getattr(args, name) is not None:
            fields[name] = _ints(name, getattr(args, name), allow_zero=name == "zero")
    if args.schedules is not None:
        fields["schedules"] = _words(args.schedules)
    if args.recompute is not None:
        fields["recompute"] = _words(args.recompute)
    if args.sequence_parallel is not None:
        choice = {"on": True, "off": False}
        words = _words(args.sequence_parallel)
        if any(w not in choice for w in words):
            raise invalid("sequence-parallel", args.sequence_parallel, "expected on, off or on,off")
        fields["sequence_parallel"] = tuple(choice[w] for w in words)
    if args.uneven_stages:
        fields["uneven_stages"] = True
    if args.dtype:
        fields["dtype"] = args.dtype
    return SearchSpace(**fields)


def _words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))


def _ints(name: str, text: str, allow_zero: bool = False) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(w) for w in _words(text)))
    except ValueError:
        raise invalid(name.replace("_", "-"), text, "expected comma-separated integers, e.g. 1,2,4") from None
    if not values or any(v < (0 if allow_zero else 1) for v in values):
        raise invalid(name.replace("_", "-"), text, f"expected comma-separated integers >= {0 if allow_zero else 1}")
    return values


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
    rows = outcome.rows
    return {
        "evaluated": len(rows), "evaluated_this_run": outcome.evaluated, "resumed": outcome.resumed,
        "pruned": dict(sorted((k, v) for k, v in outcome.plan.pruned_total.items() if k != "evaluated")),
        "pruned_by_design": outcome.plan.pruned,
        "best": table_rows(best_per_design(rows, top)), "pareto": table_rows(pareto_front(rows)),
        "files": {"results_csv": str(Path(out) / "results.csv"), "results_json": str(Path(out) / "results.json"),
                  **{k: str(v) for k, v in files.items()}},
        "wall_s": round(outcome.wall_s, 3),
    }


def _print_human(outcome: SweepOutcome, summary: dict[str, Any], checks: list[dict[str, Any]]) -> None:
    spec = outcome.spec
    print_table(f"best plans per design ({spec.model}, {spec.tokens:.3g} tokens, global batch {spec.global_batch})",
                summary["best"])
    print_table("Pareto front (time vs cost, across designs)", summary["pareto"])
    if checks:
        print_table("top plans re-run on the SimPy engine", checks)
    pruned = ", ".join(f"{k}: {v}" for k, v in summary["pruned"].items())
    print(f"{summary['evaluated']} plans evaluated ({summary['evaluated_this_run']} now, {summary['resumed']} "
          f"resumed); pruned before simulating: {pruned or 'none'}")
    print("note: " + FAST_EVALUATOR_NOTE)
    print("files: " + ", ".join(summary["files"].values()), file=sys.stdout)
