"""Benchmark: the list engine's three evaluators on the same priced graphs.

For each case the job's whole task graph (every micro-batch, as ``--exact`` builds it) is built
and priced once, untimed; then, CPU seconds (``time.process_time``), median of N:

- reference: the event pass in Python (:func:`sim.list_engine.run_times`), after its structure
  (:func:`sim.list_engine.compile_graph`, timed apart);
- kernel: the same pass compiled with numba (:mod:`sim.list_kernel`; needs ``pip install
  trainsim[fast]``, else "-"), after :func:`sim.list_passes.program_of` (timed apart); its
  first call (importing numba and loading the cached machine code, or compiling it) is not
  counted in the table and is printed apart (CPU s, once per process, on the first case);
- waves: numpy by topological levels (:mod:`sim.list_waves`), after its levels
  (:func:`sim.list_waves.compile_waves`, timed apart); "refused (s)" where it is not exact,
  with the time it took to compute the times and find that out.

Every evaluator's starts and ends are compared with the reference pass's (largest difference
printed, in units of the step). Everything is timed with Python's cyclic collector paused, as
``simulate`` and explore run it (:func:`sim.gc_pause.gc_paused`: over a graph of ~10^5 tasks
its passes would cost more than the structures themselves). Printed with the load average: the
machine is shared.

    python bench/evaluator_compare.py            # every case, 3 runs each
    python bench/evaluator_compare.py -n 5 --case 18b
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.cli.job_args import job_from_args
from sim.cli.main import build_parser
from sim.gc_pause import gc_paused
from sim.list_engine import compile_graph, run_times
from sim.list_passes import numba_available, program_of
from sim.list_waves import compile_waves, wave_times
from sim.simulate import build_priced

CASES: dict[str, list[str]] = {
    "default job (trainsim simulate, no flags)": [],
    "gpt3-18b / 256 A100 (TP8 PP4 DP8, gb 1024, 1F1B), folded": [
        "--model", "gpt3-18b", "--cluster", "dgx-a100", "--nodes", "32", "--tp", "8", "--pp", "4", "--dp", "8",
        "--global-batch", "1024", "--microbatch-size", "1"],
    "gpt3-175b / 1024 A100 (TP8 PP8 DP16, gb 1536), folded": [
        "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "128", "--tp", "8", "--pp", "8", "--dp", "16",
        "--global-batch", "1536", "--microbatch-size", "1", "--sequence-parallel"],
    "gpt3-1t / 3072 A100 (TP8 PP64 DP6, 512 micro-batches), folded": [
        "--model", "gpt3-1t", "--cluster", "dgx-a100", "--nodes", "384", "--tp", "8", "--pp", "64", "--dp", "6",
        "--global-batch", "3072", "--microbatch-size", "1", "--sequence-parallel"],
    "gpt3-1.7b / 32 A100 (TP1 PP4 DP8, gb 256), --full": [
        "--model", "gpt3-1.7b", "--cluster", "dgx-a100", "--nodes", "4", "--tp", "1", "--pp", "4", "--dp", "8",
        "--global-batch", "256", "--microbatch-size", "1", "--full"],
    "gpt3-175b / 1024 A100 (TP8 PP8 DP16, gb 1536), --full": [
        "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "128", "--tp", "8", "--pp", "8", "--dp", "16",
        "--global-batch", "1536", "--microbatch-size", "1", "--sequence-parallel", "--full"],
}


def _median_cpu(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def _diff(ref: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]) -> float:
    step = float(np.nanmax(ref[1]))
    return max(float(np.abs(ref[0] - other[0]).max()), float(np.abs(ref[1] - other[1]).max())) / step


def kernel_first_call() -> str:
    """CPU seconds of importing the kernel and its first pass (on the default job's graph): what
    a process pays once before the kernel's warm times of the table."""
    if not numba_available():
        return "kernel: numba not installed"
    job = job_from_args(build_parser(["simulate"]).parse_args(["simulate"]))
    priced = build_priced(job)
    program = program_of(priced.graph)
    dur = np.array([c.duration_s for c in priced.costs])
    cross = np.array([c.crosses_nodes for c in priced.costs])
    t0 = time.process_time()
    from sim.list_kernel import run_compiled

    run_compiled(program, dur, cross, job.cluster.gpus_per_node)
    return f"kernel's first call (import numba, load or compile its machine code): {time.process_time() - t0:.2f} CPU s"


def measure(name: str, flags: list[str], runs: int) -> str:
    """One row of the table for the case ``name``."""
    job = job_from_args(build_parser(["simulate"]).parse_args(["simulate", *flags]))
    priced = build_priced(job)
    graph, gpn = priced.graph, job.cluster.gpus_per_node
    dur = np.array([c.duration_s for c in priced.costs])
    cross = np.array([c.crosses_nodes for c in priced.costs])
    c_ref, compiled = _median_cpu(lambda: compile_graph(graph), 1)
    t_ref, ref = _median_cpu(lambda: run_times(compiled, dur.tolist(), cross.tolist(), gpn), runs)
    c_prog, program = _median_cpu(lambda: program_of(graph), 1)
    kernel = "-"
    if numba_available():
        from sim.list_kernel import run_compiled

        run_compiled(program, dur, cross, gpn)  # loads (or compiles) the machine code
        t_k, got = _median_cpu(lambda: run_compiled(program, dur, cross, gpn), runs)
        kernel = f"{t_k:.3f} ({_diff(ref, got):.0e})"
    c_w, waves = _median_cpu(lambda: compile_waves(program), 1)
    t_w, got_w = _median_cpu(lambda: wave_times(graph, program, waves, dur, cross, gpn), runs)
    wave = f"refused ({t_w:.3f})" if got_w is None else f"{t_w:.3f} ({_diff(ref, got_w):.0e})"
    levels = waves.levels if waves is not None else "-"
    return (f"| {name} | {len(graph):,} | {levels} | {c_ref:.3f} | {t_ref:.3f} | {c_prog:.3f} | {kernel} | "
            f"{c_w:.3f} | {wave} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=3, help="timed passes per evaluator (default 3)")
    parser.add_argument("--case", default="", help="only the cases whose name holds this text")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
          f"CPU s, median of {args.runs}; (largest |difference| from the reference pass / step)")
    print(kernel_first_call())
    print("| case | tasks | levels | reference: structure | reference: pass | kernel: structure | kernel: pass | "
          "waves: levels | waves: pass |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, flags in CASES.items():
        if args.case in name:
            with gc_paused():
                row = measure(name, flags, args.runs)
            print(row, flush=True)


if __name__ == "__main__":
    main()
