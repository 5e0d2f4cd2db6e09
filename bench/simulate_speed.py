"""Benchmark: wall time and peak memory of `trainsim simulate` on large jobs.

Each case runs in a fresh subprocess so its peak resident memory (ru_maxrss) is its own.
Targets (issue 13): folded under 3 s each at any published scale (the 530B and 1T rows of the
Megatron-LM scaling table included); --full GPT-3 175B on 1024 A100s under 20 s.

    python bench/simulate_speed.py            # all cases
    python bench/simulate_speed.py --quick    # folded cases only
    python bench/simulate_speed.py --case 1t  # the cases whose name holds the text

Columns: the simulation's wall and CPU seconds (``simulate`` alone), then the whole process's
(imports, the job, the summary and exit included), its peak resident memory, the simulated ranks
and Timeline spans, the micro-batches simulated of the step's (the steady state, ``--json``'s
``simulation.steady_state``), the step time and MFU. ``TRAINSIM_KERNEL=0`` runs every list-engine
pass in Python instead of the compiled kernel (numba, when installed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CASES = {
    "gpt3-175b / 1024 A100 (TP8 PP8 DP16, gb 1536), folded": [
        "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "128", "--tp", "8", "--pp", "8",
        "--dp", "16", "--global-batch", "1536", "--microbatch-size", "1", "--sequence-parallel"],
    "llama3-405b / 16384 H100 (TP8 PP16 DP128, seq 8192, gb 2048), folded": [
        "--model", "llama3-405b", "--cluster", "dgx-h100", "--nodes", "2048", "--tp", "8", "--pp", "16",
        "--dp", "128", "--seq-len", "8192", "--global-batch", "2048", "--microbatch-size", "1",
        "--uneven-stages", "--sequence-parallel"],
    "gpt3-530b / 2240 A100 (TP8 PP35 vpp3 DP8, 1120 micro-batches), folded": [
        "--model", "gpt3-530b", "--cluster", "dgx-a100", "--nodes", "280", "--tp", "8", "--pp", "35",
        "--dp", "8", "--schedule", "interleaved", "--vpp", "3", "--global-batch", "8960", "--microbatch-size", "1",
        "--sequence-parallel"],
    "gpt3-1t / 3072 A100 (TP8 PP64 DP6, 512 micro-batches), folded": [
        "--model", "gpt3-1t", "--cluster", "dgx-a100", "--nodes", "384", "--tp", "8", "--pp", "64",
        "--dp", "6", "--global-batch", "3072", "--microbatch-size", "1", "--sequence-parallel"],
    "gpt3-1t / 3072 A100 (TP8 PP64 DP6, 512 mb, no SP: Narayanan et al. 2021 Table 1), folded": [
        "--model", "gpt3-1t", "--cluster", "dgx-a100", "--nodes", "384", "--tp", "8", "--pp", "64",
        "--dp", "6", "--global-batch", "3072", "--microbatch-size", "1"],
    "gpt3-1t / 3072 A100 (TP8 PP64 vpp2 DP6, 512 mb, interleaved), folded": [
        "--model", "gpt3-1t", "--cluster", "dgx-a100", "--nodes", "384", "--tp", "8", "--pp", "64",
        "--dp", "6", "--schedule", "interleaved", "--vpp", "2", "--global-batch", "3072", "--microbatch-size", "1",
        "--sequence-parallel"],
    "gpt3-175b / 1024 A100 (TP8 PP8 DP16, gb 1536), --full": [
        "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "128", "--tp", "8", "--pp", "8",
        "--dp", "16", "--global-batch", "1536", "--microbatch-size", "1", "--sequence-parallel", "--full"],
}

CHILD = """
import gc, json, resource, sys, time
from sim.cli.job_args import job_from_args
from sim.cli.main import build_parser
from sim.simulate import simulate
from sim.summary import summarize
args = build_parser(["simulate"]).parse_args(["simulate", *sys.argv[1:]])  # what `trainsim simulate` loads
t0, c0 = time.perf_counter(), time.process_time()
result = simulate(job_from_args(args))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
s = summarize(result)
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "step_time_s": s["step_time_s"], "mfu": s["mfu"], "spans": s["simulation"]["spans"],
                  "ranks": s["simulation"]["simulated_ranks"],
                  "simulated_mb": s["simulation"]["steady_state"]["simulated_microbatches"],
                  "mb": s["simulation"]["steady_state"]["microbatches"]}))
gc.freeze()  # as trainsim's main does when the command is done
"""


def run_case(args: list[str]) -> dict[str, float]:
    """Run one case in a subprocess; returns its measurements."""
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    result["process_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return result


def main() -> None:
    """Print one line per case (CPU seconds beside wall: the machine may be shared)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="folded cases only")
    parser.add_argument("--case", metavar="TEXT", default="", help="only the cases whose name contains TEXT")
    opts = parser.parse_args()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    if sys.flags.dont_write_bytecode:
        print("note: PYTHONDONTWRITEBYTECODE is set: each process compiles the repository's modules again "
              "(~0.2 s of its CPU)")
    print(f"{'case':78} {'sim wall s':>10} {'sim cpu s':>9} {'process s':>9} {'proc cpu s':>10} {'peak MiB':>9} "
          f"{'ranks':>6} {'spans':>9} {'sim mb':>9} {'step s':>8} {'MFU':>6}")
    for name, args in CASES.items():
        if (opts.quick and "--full" in args) or opts.case not in name:
            continue
        r = run_case(args)
        print(f"{name:78} {r['wall_s']:10.2f} {r['cpu_s']:9.2f} {r['process_s']:9.2f} {r['process_cpu_s']:10.2f} "
              f"{r['maxrss_mib']:9.0f} {r['ranks']:6d} "
              f"{r['spans']:9d} {str(r['simulated_mb']) + '/' + str(r['mb']):>9} {r['step_time_s']:8.3f} {r['mfu']:6.3f}")


if __name__ == "__main__":
    main()
