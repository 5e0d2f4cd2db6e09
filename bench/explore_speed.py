"""Benchmark: plans per second per core of ``trainsim explore`` (CPU time, one process).

The space is the default plan space (see the README's "Explore a cluster design") of Llama-3 70B
on 1024 GPUs at global batch 1024, one design by default. Everything runs in this process on one
core, timed with time.process_time (other load on the machine does not count):

- enumerate + prune: the grid's structural and memory pruning;
- sweep: what ``trainsim explore`` does with the plans left (its default): a step-time lower
  bound for each (:mod:`sim.explore.bound`), then the fast evaluator on those that can reach each
  design's ``--top`` (:mod:`sim.explore.bound_prune`); the rate is plans left over the CPU time of
  bounds and evaluations;
- with ``--all``: the fast evaluator on every plan (``trainsim explore --all-plans``), and a check
  that the sweep's best plans and Pareto front are the same.

Target (issue 13): >= 300 plans/s/core.

    python bench/explore_speed.py                       # dgx-h100
    python bench/explore_speed.py --clusters dgx-h100,aws-p5,hgx-h200
    python bench/explore_speed.py --all                 # also time every plan and compare the rankings
    python bench/explore_speed.py --check 5             # also time 5 plans with simulate() (engine + Timeline)

Fully timed sweeps of Narayanan et al. 2021 Table 1's 18B and 145B rows (their GPU counts and batches):

    python bench/explore_speed.py --model gpt3-18b --gpus 256 --global-batch 1024 --clusters dgx-a100 --all
    python bench/explore_speed.py --model gpt3-145b --gpus 1536 --global-batch 1792 --clusters dgx-a100 --all
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Any

from sim.explore.bound_prune import bound_prune
from sim.explore.evaluate import Evaluator
from sim.explore.rank import best_per_design, pareto_front
from sim.explore.spec import SweepSpec
from sim.explore.sweep import job_of, plan_sweep
from sim.gc_pause import own_process
from sim.simulate import simulate

KEEP = 3  # trainsim explore's default: max(--top 3, --verify 3, the report's 3 best)


def main() -> None:
    """Print enumeration, pruning and evaluation figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--clusters", default="dgx-h100")
    parser.add_argument("--all", action="store_true", help="also evaluate every plan (explore --all-plans)")
    parser.add_argument("--check", type=int, default=0, help="also simulate this many random plans on the engine")
    args = parser.parse_args()
    own_process()  # as the trainsim program runs a sweep: each plan's survivors frozen (sim.gc_pause)
    spec = SweepSpec(model=args.model, tokens=1e12, global_batch=args.global_batch,
                     clusters=tuple(args.clusters.split(",")), gpus=(args.gpus,))
    c0 = time.process_time()
    plan = plan_sweep(spec)
    enum_s = time.process_time() - c0
    grid = sum(sum(v.values()) for v in plan.pruned.values())
    pruned = {k: v for k, v in sorted(plan.pruned_total.items()) if k != "evaluated"}
    print(f"{spec.model}, {args.gpus} GPUs, global batch {spec.global_batch}, designs {args.clusters}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"grid {grid} plans; pruned {sum(pruned.values())} ({pruned}); enumerate+prune {enum_s:.2f} s CPU "
          f"({grid / enum_s:.0f} plans/s)")
    evaluator = Evaluator()
    timed: list[dict[str, Any]] = []
    eval_cpu = [0.0]

    def evaluate(wave: list[Any]) -> list[dict[str, Any]]:
        e0 = time.process_time()
        new = [evaluator.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in wave]
        eval_cpu[0] += time.process_time() - e0
        timed.extend(new)
        return new

    c0, w0 = time.perf_counter(), time.perf_counter()
    c0 = time.process_time()
    skipped = bound_prune(plan.model, plan.members, [], KEEP, evaluate, bounder=evaluator).skipped
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = len(plan.members)
    print(f"sweep (explore's default, --top {KEEP}): {n} plans in {cpu:.2f} s CPU ({wall:.2f} s wall): "
          f"{n / cpu:.1f} plans/s/core; {len(timed)} timed ({eval_cpu[0]:.2f} s CPU, "
          f"{len(timed) / eval_cpu[0]:.1f} plans/s/core), {sum(skipped.values())} skipped by their bound "
          f"({cpu - eval_cpu[0]:.2f} s CPU)")
    best = min(timed, key=lambda r: r["step_time_s"])
    print(f"best: {best['id']} step {best['step_time_s']:.4g} s, MFU {best['mfu']:.3f}")
    rows = timed
    if args.all:
        evaluator = Evaluator()
        c0, w0 = time.process_time(), time.perf_counter()
        rows = [evaluator.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in plan.members]
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        same = best_per_design(rows, KEEP) == best_per_design(timed, KEEP) and pareto_front(rows) == pareto_front(timed)
        print(f"every plan (--all-plans): {len(rows)} in {cpu:.2f} s CPU ({wall:.2f} s wall): "
              f"{len(rows) / cpu:.1f} plans/s/core; best plans and Pareto front as the sweep's: {same}")
    if args.check:
        sample = random.Random(0).sample(rows, min(args.check, len(rows)))
        c0 = time.process_time()
        engine = [simulate(job_of(spec, r)).metrics.step_time_s for r in sample]
        per_plan = (time.process_time() - c0) / len(sample)
        worst = max(abs(e - r["step_time_s"]) / e for e, r in zip(engine, sample, strict=True))
        print(f"simulate() on {len(sample)} of them: {per_plan:.2f} s CPU per plan; largest step-time difference "
              f"{100 * worst:.3f}% (contention: {sum(r['contention'] for r in sample)} of {len(sample)})")


if __name__ == "__main__":
    main()
