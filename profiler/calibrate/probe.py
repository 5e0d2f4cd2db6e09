"""A one-second speed probe of this machine, taken around every timed measurement.

Virtual machines change speed under the same load (other tenants on the host's cores, caches
and memory), by up to 1.5x here between two recordings of the same configuration minutes apart
with nothing else running in the VM. So every microbenchmark sweep and every recording carries
this probe: the median time of one forward + backward pass of a small MLP block (a 128 x 256
input through 256 -> 704 -> 256 linear layers with SiLU, as the trainer's layers do: GEMMs,
element-wise ops and framework dispatch), single-threaded on the CPU. A profile keeps the probe
of its calibration; comparing a run's probe with it gives the speed ratio of the machine during
that run (``speed_ratio``), which validation reports and applies (see ``profiler.validate.job``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

PROBE_TOKENS, PROBE_WIDTH, PROBE_FFN = 128, 256, 704


def probe_step() -> Callable[[], None]:
    """One probe iteration: forward + backward of the MLP block (fixed seed)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_TOKENS, PROBE_WIDTH, generator=gen)
    up = torch.nn.Linear(PROBE_WIDTH, PROBE_FFN)
    down = torch.nn.Linear(PROBE_FFN, PROBE_WIDTH)

    def step() -> None:
        loss = down(torch.nn.functional.silu(up(x))).square().mean()
        loss.backward()
    return step


def speed_probe(duration_s: float = 1.0) -> float:
    """Median seconds of one probe iteration over ``duration_s`` (after a short warm-up)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step = probe_step()
        for _ in range(5):
            step()
        times = []
        deadline = time.perf_counter() + duration_s
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return float(statistics.median(times))
    finally:
        torch.set_num_threads(threads)


def speed_ratio(reference_s: float | None, measured_s: float | None) -> float:
    """How much faster the machine ran than when the reference was taken (1.0 if unknown)."""
    if not reference_s or not measured_s:
        return 1.0
    return reference_s / measured_s
