"""Benchmark: the in-process time of one folded `sim.simulate.simulate(job)` on models <= 20B.

Each case's Job is made as `trainsim simulate` makes it from its flags, simulated once unmeasured
(caches, lazy imports), then N times; the median CPU seconds (``time.process_time``) of a whole
simulation and of its phases, timed by wrapping the functions :mod:`sim.simulate` calls:
building the schedule and task graph, pricing it, the engine's passes, writing the Timeline, and
the metrics and memory (curves, breakdowns, HBM timelines); "other" is the rest. Target (issue
29): <= 20 ms for every model <= 20B.

    python bench/inprocess_speed.py          # 20 runs per case
    python bench/inprocess_speed.py -n 50
    python bench/inprocess_speed.py --cold   # each case's first simulation in a fresh process
    python bench/inprocess_speed.py --profile "gpt3-1.7b"   # cProfile of the case(s) whose name holds it
    python bench/inprocess_speed.py --large -n 3   # the published 530B and 1T folded cases instead

A process keeps what is pure of a simulation for the next one: each job's pricer (its op and
task prices), each cluster's collective model, the ops of the last few (model, plan)s. The
repeated runs measure a job simulated again; ``--cold`` measures its first simulation in a
process that has imported everything and simulated another job (the 18B 3D plan warms the
default case, the default job every other), median of N fresh processes (N = 5 unless -n).

Cases: trainsim's default job; Narayanan et al. 2021 Table 1's 1.7B (32 A100, TP1 PP1 DP32, global
batch 512) and 18B rows (256 A100, TP8 PP1 DP32, global batch 1024); the same 18B on 256 A100 as
a 3D plan (TP8 PP4 DP8, global batch 1024, 1F1B). All folded, micro-batch 1. ``--large``: the
folded 530B and 1T cases of ``bench/simulate_speed.py`` instead (target <= 200 ms each).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import sim.simulate as simulate_module
from sim.cli.job_args import job_from_args
from sim.cli.main import build_parser

A100 = ["--cluster", "dgx-a100", "--microbatch-size", "1"]
CASES = {
    "default job (trainsim simulate, no flags)": [],
    "gpt3-1.7b / 32 A100 (TP1 PP1 DP32, gb 512: Narayanan et al. 2021 Table 1)": [
        "--model", "gpt3-1.7b", "--nodes", "4", "--tp", "1", "--pp", "1", "--dp", "32", "--global-batch", "512", *A100],
    "gpt3-18b / 256 A100 (TP8 PP1 DP32, gb 1024: Narayanan et al. 2021 Table 1)": [
        "--model", "gpt3-18b", "--nodes", "32", "--tp", "8", "--pp", "1", "--dp", "32", "--global-batch", "1024", *A100],
    "gpt3-18b / 256 A100 (TP8 PP4 DP8, gb 1024, 1F1B)": [
        "--model", "gpt3-18b", "--nodes", "32", "--tp", "8", "--pp", "4", "--dp", "8", "--global-batch", "1024", *A100],
}
# phase -> the names in sim.simulate's namespace whose calls it times
PHASES = {
    "graph": ("build_schedule", "build_task_graph"),
    "pricing": ("task_coster", "cost_graph"),
    "engine": ("timed", "timed_costs"),
    "timeline": ("write_timeline", "TimelineSource.__init__", "TimelineSource.write"),
    "metrics+memory": ("step_metrics", "MemoryModel", "_memory", "memory_timelines"),
    "window": ("window_figures",),  # both, from the 1- and 2-copy steps (sim.window_step)
}


class PhaseClock:
    """CPU seconds spent inside the wrapped functions of :mod:`sim.simulate`, per phase
    (outermost calls only: a phase's function calling another's counts once, in the outer one)."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PHASES, 0.0)
        self._depth = 0

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed into ``phase``."""
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.spent[phase] += time.process_time() - c0
        return timed_call

    def install(self) -> None:
        """Wrap every phase's functions in :mod:`sim.simulate`'s namespace (those it has: an
        older checkout's, with ``PYTHONPATH=TREE python -P``, may lack some)."""
        for phase, names in PHASES.items():
            for name in names:
                owner_name, _, attr = name.rpartition(".")  # "Class.method": wrapped on the class
                owner = getattr(simulate_module, owner_name, None) if owner_name else simulate_module
                if owner is not None and hasattr(owner, attr):
                    setattr(owner, attr, self.wrap(phase, getattr(owner, attr)))


def job_for(args: list[str]) -> Any:
    """The Job `trainsim simulate ARGS` runs."""
    return job_from_args(build_parser(["simulate"]).parse_args(["simulate", *args]))


def measure(job: Any, runs: int, clock: PhaseClock) -> tuple[float, dict[str, float]]:
    """Median CPU seconds of ``runs`` simulations of ``job`` (after one unmeasured) and of each phase."""
    simulate_module.simulate(job)
    totals: list[float] = []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    for _ in range(runs):
        clock.spent = dict.fromkeys(PHASES, 0.0)
        c0 = time.process_time()
        simulate_module.simulate(job)
        totals.append(time.process_time() - c0)
        for p, s in clock.spent.items():
            phases[p].append(s)
    return statistics.median(totals), {p: statistics.median(v) for p, v in phases.items()}


COLD = """
import sys, time
sys.path.insert(0, "bench")
import inprocess_speed as b
import sim.simulate as s
names = list(b.CASES)
name = names[int(sys.argv[1])]
s.simulate(b.job_for(b.CASES[names[-1] if name == names[0] else names[0]]))  # another job
job = b.job_for(b.CASES[name])
c0 = time.process_time()
s.simulate(job)
print(time.process_time() - c0)
"""


def cold(index: int, runs: int) -> float:
    """Median CPU seconds of case ``index``'s first simulation in ``runs`` fresh processes."""
    times = [float(subprocess.run([sys.executable, "-c", COLD, str(index)], capture_output=True, text=True,
                                  check=True).stdout.split()[-1]) for _ in range(runs)]
    return statistics.median(times)


def profile(job: Any, runs: int) -> None:
    """Print the cProfile of ``runs`` simulations of ``job`` (after one unmeasured), by own time."""
    simulate_module.simulate(job)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        simulate_module.simulate(job)
    prof.disable()
    pstats.Stats(prof).sort_stats(os.environ.get("SORT", "tottime")).print_stats(int(os.environ.get("TOP", "30")))


def large_cases() -> dict[str, list[str]]:
    """The folded 530B and 1T cases of ``bench/simulate_speed.py``."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from simulate_speed import CASES as PROCESS_CASES

    return {name: args for name, args in PROCESS_CASES.items()
            if ("530b" in name or "1t" in name) and "--full" not in args}


def _set_kernel(mode: str) -> str:
    """Run every pass on the reference pass, or load the compiled kernel now; says which runs."""
    if mode == "reference":
        os.environ["TRAINSIM_KERNEL"] = "0"
        return "reference pass"
    from sim.list_passes import prefer_kernel

    return "compiled kernel (loaded up front)" if prefer_kernel() else "reference pass (no numba here)"


def main() -> None:
    """Print one line per case: median ms of the whole simulation and of each phase."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="measured runs per case (default 20)")
    parser.add_argument("--profile", metavar="TEXT", help="cProfile the cases whose name contains TEXT instead")
    parser.add_argument("--cold", action="store_true", help="each case's first simulation in fresh processes")
    parser.add_argument("--large", action="store_true", help="the 530B and 1T folded cases of simulate_speed.py")
    parser.add_argument("--kernel", choices=("reference", "loaded"), default="reference",
                        help="the list engine's passes on the reference pass (what one small job gets; the "
                             "default) or on the compiled kernel, loaded up front (a process that has simulated "
                             "~60,000 tasks' worth already: sim.list_passes)")
    opts = parser.parse_args()
    if opts.large and opts.cold:
        parser.error("--large runs in this process only (not with --cold)")
    if opts.large:
        CASES.clear()
        CASES.update(large_cases())
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ../shared paths as the CLI's
    if opts.cold:
        runs = opts.runs if "-n" in sys.argv or "--runs" in sys.argv else 5
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; first simulation in a process, "
              f"median of {runs} processes, CPU ms")
        for index, name in enumerate(CASES):
            print(f"{name:78} {cold(index, runs) * 1e3:7.1f}")
        return
    jobs = {name: job_for(args) for name, args in CASES.items()}
    if opts.profile:
        for name in (n for n in jobs if opts.profile in n):
            print(name)
            profile(jobs[name], opts.runs)
        return
    kernel = _set_kernel(opts.kernel)
    clock = PhaseClock()
    clock.install()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
          f"median of {opts.runs} runs, CPU ms; list engine passes: {kernel}")
    print(f"{'case':78} {'total':>7} " + " ".join(f"{p:>14}" for p in PHASES) + f" {'other':>7}")
    for name, job in jobs.items():
        total, phases = measure(job, opts.runs, clock)
        other = total - sum(phases.values())
        print(f"{name:78} {total * 1e3:7.1f} " + " ".join(f"{s * 1e3:14.1f}" for s in phases.values())
              + f" {other * 1e3:7.1f}")


if __name__ == "__main__":
    main()
