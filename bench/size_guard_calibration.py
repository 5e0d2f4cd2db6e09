"""Size guard calibration: real tasks, spans, memory and CPU time of simulate() against
:func:`sim.size_guard.estimate_job` for a few jobs (run: ``python bench/size_guard_calibration.py``).

Memory is tracemalloc's peak of the simulate call (Python allocations, numpy included);
CPU time is the process's. Ratios real/estimate at or below 1 mean the guard over-estimates
(it refuses early, never late)."""

from __future__ import annotations

import time
import tracemalloc

from sim.job import resolve_job
from sim.simulate import build_priced, simulate
from sim.size_guard import estimate_job

JOBS = (
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 32},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 32, "steps": 20},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 4, "pp": 2, "global_batch": 1024},
    {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 2, "tp": 2, "pp": 8, "global_batch": 16,
     "schedule": "interleaved", "vpp": 2},
    {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2, "global_batch": 64, "zero": 3},
    {"model": "small", "cluster": "dgx-h100", "nodes": 2, "tp": 1, "pp": 2, "global_batch": 256, "full": True},
    {"model": "small", "cluster": "cpu-host", "gpus_per_node": 2, "tp": 1, "pp": 2, "global_batch": 64},
    {"model": "llama3-70b", "cluster": "dgx-h100", "nodes": 8, "tp": 8, "pp": 4, "global_batch": 64},
)


def main() -> None:
    print(f"{'job':60} {'tasks':>14} {'spans':>18} {'MB':>14} {'CPU s':>14}")
    for settings in JOBS:
        job = resolve_job(settings)
        est = estimate_job(job)
        tasks = len(build_priced(job).graph)
        tracemalloc.start()
        t0 = time.process_time()
        result = simulate(job)
        cpu = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        name = ",".join(f"{k}={v}" for k, v in settings.items() if k not in ("cluster",))[:60]
        print(f"{name:60} {tasks:>6}/{est.tasks:<7} {len(result.timeline):>8}/{est.spans:<9} "
              f"{peak / 1e6:>6.0f}/{est.bytes / 1e6:<7.0f} {cpu:>6.2f}/{est.seconds:<7.2f}")


if __name__ == "__main__":
    main()
