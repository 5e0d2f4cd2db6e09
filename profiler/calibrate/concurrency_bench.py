"""How processes on one host slow each other down: k processes working at once.

``k`` processes (spawned, one thread each) start together and run for a fixed time either
- "memory": a large copy (``a.copy_(b)`` on 64 MiB tensors, far beyond the caches), reporting
  bytes per second: the best total over k is the host's DRAM bandwidth;
- "compute": the speed probe's MLP step (:mod:`profiler.calibrate.probe`: GEMMs, element-wise
  ops, dispatch), reporting steps per second: the best total over k, in units of one process
  alone, is how many processes' worth of compute the host runs at once (its effective cores).
CPU hosts only.
"""

from __future__ import annotations

import time
from typing import Any

Sample = dict[str, Any]
STREAM_NUMEL = 1 << 24  # 64 MiB of fp32 per tensor
DURATION_S = 1.5


def _work(kind: str) -> tuple[Any, float]:
    """The repeated call and the units (bytes or steps) one call counts for."""
    import torch

    if kind == "memory":
        a, b = torch.empty(STREAM_NUMEL), torch.ones(STREAM_NUMEL)
        return (lambda: a.copy_(b)), 2.0 * 4 * STREAM_NUMEL
    from profiler.calibrate.probe import probe_step

    return probe_step(), 1.0


def _worker(queue: Any, kind: str, start_at: float, duration_s: float) -> None:
    import torch

    torch.set_num_threads(1)
    call, units = _work(kind)
    for _ in range(3):
        call()
    while time.time() < start_at:
        time.sleep(0.001)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration_s:
        call()
        calls += 1
    queue.put(units * calls / (time.perf_counter() - start))


def run_concurrent(kind: str, k: int, duration_s: float = DURATION_S) -> Sample:
    """Rate (bytes/s or steps/s) of each of ``k`` processes running ``kind`` work at once."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0  # after every process has started and allocated
    procs = [ctx.Process(target=_worker, args=(queue, kind, start_at, duration_s), daemon=True)
             for _ in range(k)]
    for p in procs:
        p.start()
    rates = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    return {"bench": f"{kind}_streams", "processes": k, "rates": rates}
