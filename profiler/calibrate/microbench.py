"""Run the microbenchmark sweeps and keep their samples (a JSON-ready dict).

The compute sweep runs in this process (one thread on a CPU, as each trainer rank does; the
first GPU on a CUDA machine), the collective sweep in fresh process groups of 2, 4 and 8 ranks
(never more ranks than GPUs on a CUDA machine); on a CPU host, 1, 2, 2 x cpu_count and 8 processes
stream memory and compute together (the host's DRAM bandwidth and effective cores). A quiet machine is waited for first, and the
background load during the sweeps is recorded with the samples. ``on_progress(done, total)``
reports progress in cases.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

from profiler.calibrate.collective_bench import GROUP_SIZES, collective_cases, run_group
from profiler.calibrate.compute_bench import compute_cases, run_case
from profiler.calibrate.concurrency_bench import run_concurrent
from profiler.calibrate.probe import speed_probe
from profiler.calibrate.quiet import BackgroundMonitor, wait_for_quiet
from profiler.host_identity import host_identity

Progress = Callable[[int, int], None]


def _device() -> Any:
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    torch.set_num_threads(1)
    return torch.device("cpu")


def group_sizes() -> tuple[int, ...]:
    """Group sizes to sweep: 2, 4, 8 (at most the GPU count on a CUDA machine)."""
    import torch

    if torch.cuda.is_available():
        return tuple(n for n in GROUP_SIZES if n <= torch.cuda.device_count())
    return GROUP_SIZES


def _offset(on_progress: Progress | None, base: int, total: int) -> Callable[[int], None] | None:
    """A per-group progress callback reporting overall progress."""
    if on_progress is None:
        return None
    report = on_progress
    return lambda i: report(base + i, total)


def run_microbench(*, reps: int = 7, on_progress: Progress | None = None) -> dict[str, Any]:
    """Every sweep; returns {"host": ..., "samples": [...]} (see the module docstring)."""
    import torch

    device = _device()
    compute = compute_cases()
    sizes = group_sizes()
    collective = {n: collective_cases(n) for n in sizes}
    total = len(compute) + sum(len(c) for c in collective.values())
    done = 0
    wait_for_quiet()
    monitor = BackgroundMonitor().start()
    probes = [speed_probe()]
    samples = []
    for bench, args in compute:
        samples.append(run_case(bench, args, device, reps))
        done += 1
        if on_progress:
            on_progress(done, total)
    for n in sizes:
        samples += run_group(n, collective[n], reps, on_progress=_offset(on_progress, done, total))
        done += len(collective[n])
    if device.type == "cpu":
        counts = sorted({1, 2, 2 * (os.cpu_count() or 1), 8})
        samples += [run_concurrent(kind, k) for kind in ("memory", "compute") for k in counts]
    probes.append(speed_probe())
    host = {"cpu_count": os.cpu_count(), "machine": platform.machine(), "torch": torch.__version__,
            "device": str(device.type), "backend": "nccl" if device.type == "cuda" else "gloo",
            "background_cores": round(monitor.stop(), 3), "reps": reps,
            "probe_s": [round(p, 7) for p in probes], **host_identity()}
    return {"host": host, "samples": samples}
