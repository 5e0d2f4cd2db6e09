"""``trainsim validate``: simulate a recorded run's exact configuration and compare with it.

    trainsim validate traces/suite-pp4-1f1b-small --profile profiles/this-host.toml [--json] [--report v.html]
    trainsim validate RUN --profile P --classes    # also: compute time by pass and op class (GEMM, attention, rest)
    trainsim validate --suite                      # the whole suite (committed runs), exit 1 on a miss
    trainsim validate --suite --record             # re-record the suite's runs first (slow)
    trainsim validate --suite --record --repeat 2  # a further recording of each (repeat-2/), at another time
    trainsim validate --calibration --record       # (re-)record the calibration runs only
    trainsim validate --suite --moe [--record [--repeat N]]  # the MoE suite (recorded MoE runs) instead
    trainsim validate --published [FILE] [--json] [--report p.html]   # published GPU runs (no torch)

Targets per configuration: step time within 10%, bubble within 3 points, exposed communication
within 5 points. ``--suite`` uses ``profiles/this-host.toml`` when it exists, one run only when that
profile was calibrated on this host (its recorded host id, hostname and CPU model), unless ``--profile``
or ``--no-profile`` says otherwise (one run without it: a one-line warning saying why, then the cluster
preset; the JSON's ``profile`` and ``calibration`` say which); ``--suite`` also shows the errors
before calibration (the cpu-host preset). The measured step is the median over the kept steps of
the longest rank's step (``step_time_s (median of N steps)``), as ``trainsim analyze`` reports it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from profiler.analysis import step_statistic
from profiler.host_identity import other_host
from profiler.validate.classes import class_rows, measured_classes, simulated_classes
from profiler.validate.compare import Comparison, validate_run
from profiler.validate.measured import step_figures
from profiler.validate.published.command import add_arguments as add_published_arguments
from profiler.validate.published.command import run_published
from profiler.validate.record import record_run
from profiler.validate.repeatability import leave_one_out
from profiler.validate.report import comparison_rows, write_suite_report, write_validation_report
from profiler.validate.suite import CALIBRATION, MOE_SUITE, SUITE, RunSpec, find_runs
from profiler.validate.suite_run import (
    DEFAULT_PROFILE,
    MOE_PROFILE,
    floor_checks,
    repeatability_summary,
    suite_rows,
    validate_suite,
)
from sim.atomic import OutputKind, check_output
from sim.cli.arg_types import check_output_paths
from sim.cli.output import print_json, print_table
from sim.report.options import add_plotly_js_argument
from sim.simulate import build_and_price
from topo import load_cluster_file
from topo.hardware_profile import HardwareProfile, load_profile

EXIT_MISS = 1
# The suite table on a terminal (the JSON and the report have every column of the rows).
TERMINAL_COLUMNS = ("config", "ranks", "step_s", "sim_step_s", "step_err", "step_err_before", "bubble_err",
                    "exposed_err", "recordings", "repeat_step_err", "repeat_bubble_err", "repeat_exposed_err",
                    "repeat_ok", "ok")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``validate`` subcommand."""
    p = sub.add_parser("validate", help="compare simulated and measured runs (one run or the suite)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", nargs="?", help="a recorded run directory (manifest.json + traces)")
    p.add_argument("--suite", action="store_true", help="validate every run of the suite")
    p.add_argument("--calibration", action="store_true", help="operate on the calibration runs instead")
    p.add_argument("--moe", action="store_true", help="with --suite: the MoE suite (recorded MoE runs) instead")
    p.add_argument("--runs", help="comma-separated suite run names (default: all)")
    p.add_argument("--record", action="store_true", help="(re-)record the runs first (launches the trainer)")
    p.add_argument("--repeat", type=int, default=1,
                   help="with --record: record into the runs' repeat-<N>/ (N > 1: further recordings, whose steps "
                        "join the main recording's in every measured figure; default %(default)s: the main one)")
    p.add_argument("--traces", default="traces", help="root of the suite's runs (default %(default)s)")
    p.add_argument("--profile", help=f"hardware profile (default: {DEFAULT_PROFILE}; with --moe: {MOE_PROFILE})")
    p.add_argument("--no-profile", action="store_true", help="the cluster preset alone (before calibration)")
    p.add_argument("--cluster", help="cluster preset or TOML the run ran on (default: cpu-host for CPU runs)")
    p.add_argument("--report", metavar="FILE.html", help="write an HTML report")
    add_plotly_js_argument(p)
    p.add_argument("--classes", action="store_true",
                   help="one run: also compare compute time per step by pass and op class (GEMM, attention, the rest)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_published_arguments(p)
    p.set_defaults(func=run)


def _profile(args: argparse.Namespace) -> tuple[HardwareProfile | None, str | None]:
    """The profile asked for, else ``profiles/this-host.toml`` if it exists: for the suite (its
    committed runs were recorded where that profile was calibrated), and for one run only when it
    was calibrated on this host (:func:`profiler.host_identity.other_host`); and for one run without
    it, the one-line warning saying why the uncalibrated preset is used (printed once the run is read,
    so a run that cannot be read still ends in one line)."""
    if args.no_profile:
        return None, None
    if args.profile:
        return load_profile(args.profile), None
    default = _default_profile(args)
    if not Path(default).is_file():
        why = f"no {default} here"
    else:
        profile = load_profile(default)
        mismatch = other_host(profile.meta) if args.run else None
        if mismatch is None:
            return profile, None
        why = f"{default} is another machine's ({mismatch})"
    return None, (f"trainsim validate: warning: {why}; comparing with the uncalibrated cluster preset (calibrate "
                  "this host with `trainsim calibrate --microbench`, or give --profile)") if args.run else None


def _default_profile(args: argparse.Namespace) -> str:
    """``profiles/this-host.toml``; for the MoE suite the profile of its recordings' machine
    state (:data:`profiler.validate.suite_run.MOE_PROFILE`)."""
    return MOE_PROFILE if args.moe else DEFAULT_PROFILE


def _profile_path(args: argparse.Namespace, profile: HardwareProfile | None) -> str | None:
    """The profile file used (None: the cluster preset)."""
    if profile is None:
        return None
    return str(args.profile or _default_profile(args))


def _step_label(c: Comparison) -> str:
    """``step_time_s (median of N steps)``: the statistic of the measured step, named."""
    steps = step_figures(*(r.timeline for r in c.measured.recordings)).steps
    return f"step_time_s ({step_statistic(steps)})"


def run(args: argparse.Namespace) -> int:
    """Dispatch: record, then validate one run or the suite; or the published runs."""
    check_output_paths(args)
    if args.published is not None:
        return run_published(args)
    if args.moe and not args.suite:
        raise ValueError("--moe selects the MoE suite: give it with --suite")
    if bool(args.run) == (args.suite or args.calibration):
        raise ValueError("give either a run directory or --suite/--calibration")
    profile, warning = _profile(args)
    if args.run:
        return _one(args, profile, warning)
    suite = CALIBRATION if args.calibration else MOE_SUITE if args.moe else SUITE
    specs = find_runs(args.runs.split(",") if args.runs else None, suite)
    if args.repeat < 1:
        raise ValueError(f"repeat={args.repeat!r} is invalid: expected an integer >= 1")
    if args.record:  # the recordings' root is an output: refused before minutes of recording, not after
        check_output(args.traces, "--traces", OutputKind.DIRECTORY)
        _record(specs, args.traces, args.repeat)
    if args.calibration and args.record:
        return 0
    return _suite(args, specs, profile)


def _one(args: argparse.Namespace, profile: HardwareProfile | None, warning: str | None) -> int:
    cluster = None
    if args.cluster:
        from topo import get_cluster

        cluster = load_cluster_file(args.cluster) if args.cluster.endswith(".toml") else get_cluster(args.cluster)
    c = validate_run(args.run, profile=profile, cluster=cluster)
    if warning:
        print(warning, file=sys.stderr)
    if args.report:
        write_validation_report(c, args.report, args.plotly_js)
    classes = _class_rows(c) if args.classes else None
    floor = leave_one_out(c.measured)
    used = _profile_path(args, profile)
    label = _step_label(c)
    if args.json:
        print_json({**c.as_dict(), "profile": used, "calibration": "profile" if used else "preset",
                    "measured_step_statistic": label.split("(", 1)[1].rstrip(")"),
                    **({"classes": classes} if classes is not None else {}),
                    "noise_floor": None if floor is None else floor.as_dict()})
    else:
        rows = [{**r, "metric": label} if r["metric"] == "step_time_s" else r for r in comparison_rows(c)]
        print_table(f"{args.run}: measured vs simulated ({f'profile {used}' if used else 'preset, uncalibrated'})",
                    rows)
        if floor is not None:
            f = floor.as_dict()
            print(f"noise floor (each of the {f['recordings']} recordings vs the others): step "
                  f"{f['step_time_s']:.1%}, bubble {f['bubble_fraction'] * 100:.1f} pts, exposed "
                  f"{f['exposed_comm_fraction'] * 100:.1f} pts (median |error|); {f['within_targets']}/"
                  f"{f['recordings']} recordings within all targets")
        if classes is not None:
            print_table("compute time per step by pass and op class (s; median over ranks and steps)", classes)
    return 0 if c.ok else EXIT_MISS


def _class_rows(c: Comparison) -> list[dict[str, Any]]:
    _, _, graph, _ = build_and_price(c.simulation.job)
    return class_rows(measured_classes(c.measured), simulated_classes(c.simulation.timeline, graph))


def _suite(args: argparse.Namespace, specs: tuple[RunSpec, ...], profile: HardwareProfile | None) -> int:
    with _progress() as progress:
        task = progress.add_task("simulating", total=len(specs))
        entries = validate_suite(args.traces, profile, specs=specs,
                                 on_done=lambda name: progress.advance(task))
    rows = suite_rows(entries)
    floor = repeatability_summary(entries)
    if args.report:
        write_suite_report(rows, args.report, "trainsim — validation suite", floor, args.plotly_js)
    if args.json:
        print_json({"profile": _profile_path(args, profile),
                    "ok": all(e.ok for e in entries), "runs": rows, "repeatability": floor,
                    "floor_checks": [{"config": c.config, "metric": c.metric, "error": c.error, "target": c.target,
                                      "floor": c.floor, "allowed": c.allowed, "ok": c.ok}
                                     for c in floor_checks(entries)]})
    else:
        print_table("validation suite: measured vs simulated (err = sim - measured; step: relative; "
                    "repeat_*: the noise floor; every column: --json or --report)", rows, TERMINAL_COLUMNS)
        print(_floor_line(floor))
    misses = [e.spec.name for e in entries if not e.ok]
    if misses:
        print(f"trainsim validate: {len(misses)} configuration(s) miss the targets: {', '.join(misses)}",
              file=sys.stderr)
        return EXIT_MISS
    return 0


def _floor_line(floor: dict[str, Any]) -> str:
    """One line: the measurement's own repeatability beside the simulator's accuracy."""
    if not floor["recordings_compared"]:
        return "noise floor: one recording per configuration (record more with --record --repeat 2)"
    return (f"noise floor: a recording vs the other recordings of its config: mean |step err| "
            f"{floor['recording_vs_others_mean_abs_step_err']:.1%}, {floor['recordings_within_targets']}/"
            f"{floor['recordings_compared']} within all targets; the simulator vs each recording: "
            f"{floor['simulator_vs_each_recording_mean_abs_step_err']:.1%}, "
            f"{floor['simulator_within_targets_of_recordings']}/{floor['recordings_compared']}; vs the pooled "
            f"recordings (the table): {floor['simulator_mean_abs_step_err']:.1%}, "
            f"{floor['configurations_within_targets']}/{floor['configurations']} configurations")


def _record(specs: tuple[RunSpec, ...], root: str, repeat: int) -> None:
    with _progress() as progress:
        task = progress.add_task("recording", total=len(specs))
        for spec in specs:
            progress.update(task, description=f"recording {spec.name}")
            record_run(spec, root, repeat=repeat)
            progress.advance(task)


def _progress() -> Progress:
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    console = Console(stderr=True)
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
