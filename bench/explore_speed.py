"""Benchmark: plans evaluated per second per core by ``trainsim explore``'s fast evaluator.

The space is the default plan space (see the README's "Explore a cluster design") of Llama-3 70B
on 1024 GPUs at global batch 1024, one design by default. Everything runs in this process on one
core; the rate is evaluated plans over the CPU time spent evaluating them (time.process_time, so
other load on the machine does not count). Enumeration and pruning are timed separately.
Target (issue 6): >= 50 plans/s/core.

    python bench/explore_speed.py                       # dgx-h100
    python bench/explore_speed.py --clusters dgx-h100,aws-p5,hgx-h200
    python bench/explore_speed.py --check 5             # also time 5 plans with simulate() (engine + Timeline)
"""

from __future__ import annotations

import argparse
import random
import time

from sim.explore.evaluate import Evaluator
from sim.explore.spec import SweepSpec
from sim.explore.sweep import job_of, plan_sweep
from sim.simulate import simulate


def main() -> None:
    """Print enumeration, pruning and evaluation figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--clusters", default="dgx-h100")
    parser.add_argument("--check", type=int, default=0, help="also simulate this many random plans on the engine")
    args = parser.parse_args()
    spec = SweepSpec(model=args.model, tokens=1e12, global_batch=args.global_batch,
                     clusters=tuple(args.clusters.split(",")), gpus=(args.gpus,))
    c0 = time.process_time()
    plan = plan_sweep(spec)
    enum_s = time.process_time() - c0
    grid = sum(sum(v.values()) for v in plan.pruned.values())
    pruned = {k: v for k, v in sorted(plan.pruned_total.items()) if k != "evaluated"}
    print(f"{spec.model}, {args.gpus} GPUs, global batch {spec.global_batch}, designs {args.clusters}")
    print(f"grid {grid} plans; pruned {sum(pruned.values())} ({pruned}); enumerate+prune {enum_s:.2f} s CPU "
          f"({grid / enum_s:.0f} plans/s)")
    evaluator = Evaluator()
    c0, w0 = time.process_time(), time.perf_counter()
    rows = [evaluator.evaluate_one(plan.model, spec.tokens, c, cluster) for c, cluster in plan.members]
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(f"evaluated {len(rows)} plans in {cpu:.2f} s CPU ({wall:.2f} s wall): "
          f"{len(rows) / cpu:.1f} plans/s/core")
    best = min(rows, key=lambda r: r["step_time_s"])
    print(f"best: {best['id']} step {best['step_time_s']:.4g} s, MFU {best['mfu']:.3f}")
    if args.check:
        sample = random.Random(0).sample(rows, min(args.check, len(rows)))
        c0 = time.process_time()
        engine = [simulate(job_of(spec, r)).metrics.step_time_s for r in sample]
        per_plan = (time.process_time() - c0) / len(sample)
        worst = max(abs(e - r["step_time_s"]) / e for e, r in zip(engine, sample, strict=True))
        print(f"simulate() on {len(sample)} of them: {per_plan:.2f} s CPU per plan "
              f"({per_plan * len(rows) / cpu:.0f}x slower); largest step-time difference {100 * worst:.3f}% "
              f"(contention: {sum(r['contention'] for r in sample)} of {len(sample)})")


if __name__ == "__main__":
    main()
