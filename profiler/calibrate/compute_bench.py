"""Compute microbenchmarks on this process's device: GEMMs, attention, element-wise, tiny ops.

Each case runs its kernel ``reps`` times after a warm-up and keeps the median time (robust to
the other processes of a shared machine); on a GPU the device is synchronised around the timed
loop. Sizes follow what the trainer runs: token counts of a micro-batch and the layer widths of
the model presets. Results are plain dicts (JSON-ready "samples"): what was run, its work (FLOPs
or bytes) and seconds per call. Torch is imported lazily.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

Sample = dict[str, Any]

GEMM_TOKENS = (64, 128, 256, 512)
GEMM_WIDTHS = ((64, 64), (64, 176), (128, 128), (256, 256), (256, 704), (512, 512), (512, 1408),
               (1024, 1024), (1024, 2816))
ATTENTION_SHAPES = ((4, 32, 16), (8, 128, 32), (8, 128, 64), (16, 256, 64))  # heads, seq, head_dim
ELEMENTWISE_NUMELS = (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)
FRESH_NUMELS = (1 << 18, 1 << 20, 1 << 22, 1 << 24)  # 1-64 MiB: the sizes of FSDP's unit buffers
ELEMENT_BYTES = 4  # fp32


def _sync(device: Any) -> None:
    import torch

    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_call(fn: Callable[[], Any], device: Any, reps: int, inner: int = 4) -> float:
    """Median seconds per call of ``fn`` over ``reps`` timed batches of ``inner`` calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        _sync(device)
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def gemm_cases() -> Iterator[tuple[int, int, int]]:
    """(tokens, in, out) shapes of the sweep, both orientations of each width pair."""
    for m in GEMM_TOKENS:
        for k, n in GEMM_WIDTHS:
            yield m, k, n
            if k != n:
                yield m, n, k


def gemm_sample(m: int, k: int, n: int, device: Any, reps: int) -> Sample:
    """One linear layer forward (m x k) @ (k x n): 2mkn FLOPs."""
    import torch

    x = torch.randn(m, k, device=device)
    w = torch.randn(n, k, device=device)
    seconds = time_call(lambda: torch.nn.functional.linear(x, w), device, reps)
    return {"bench": "gemm", "m": m, "k": k, "n": n, "flops": 2.0 * m * k * n, "seconds": seconds}


def attention_sample(heads: int, seq: int, head_dim: int, device: Any, reps: int) -> Sample:
    """Causal SDPA forward; FLOPs as the simulator counts them (4 s^2 h, halved by causality)."""
    import torch

    q, k, v = (torch.randn(1, heads, seq, head_dim, device=device) for _ in range(3))
    seconds = time_call(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                        device, reps)
    flops = 4.0 * seq * seq * heads * head_dim * 0.5
    return {"bench": "attention", "heads": heads, "seq": seq, "head_dim": head_dim, "flops": flops,
            "seconds": seconds}


def elementwise_sample(numel: int, device: Any, reps: int) -> Sample:
    """out = a + b: reads two tensors and writes one (3 x numel x 4 bytes)."""
    import torch

    a, b = torch.randn(numel, device=device), torch.randn(numel, device=device)
    out = torch.empty_like(a)
    seconds = time_call(lambda: torch.add(a, b, out=out), device, reps)
    return {"bench": "elementwise", "numel": numel, "bytes": 3.0 * numel * ELEMENT_BYTES, "seconds": seconds}


def fresh_sample(numel: int, device: Any, reps: int) -> Sample:
    """a + b into never-touched memory and into the same memory again: the difference is the
    first-touch cost of ``numel x 4`` fresh bytes (``out_bytes``; page faults and the kernel's
    zeroing on a CPU, which a process pays whenever its allocator maps a large buffer anew).
    On a CPU every timed output is a new anonymous mapping (what glibc's malloc returns for a
    large block), so the result does not depend on the allocator's caching; on a GPU both times
    are into a caching-allocator block (no first touch to measure)."""
    import mmap

    import numpy as np
    import torch

    a, b = torch.randn(numel, device=device), torch.randn(numel, device=device)
    if device.type != "cpu":
        buffer = torch.empty_like(a)
        seconds = time_call(lambda: torch.add(a, b, out=buffer), device, reps)
        return {"bench": "fresh", "numel": numel, "out_bytes": float(numel * ELEMENT_BYTES), "seconds": seconds,
                "seconds_reused": seconds}
    fresh: list[float] = []
    reused: list[float] = []
    for _ in range(reps):
        region = mmap.mmap(-1, numel * ELEMENT_BYTES)
        target = torch.from_numpy(np.frombuffer(region, dtype=np.float32))
        for times in (fresh, reused):  # first touch, then the same pages again
            start = time.perf_counter()
            torch.add(a, b, out=target)
            times.append(time.perf_counter() - start)
        del target
        region.close()
    return {"bench": "fresh", "numel": numel, "out_bytes": float(numel * ELEMENT_BYTES),
            "seconds": statistics.median(fresh), "seconds_reused": statistics.median(reused)}


def compute_cases() -> list[tuple[str, tuple[int, ...]]]:
    """Every case of the compute sweep, in a fixed order."""
    cases: list[tuple[str, tuple[int, ...]]] = [("gemm", c) for c in gemm_cases()]
    cases += [("attention", c) for c in ATTENTION_SHAPES]
    cases += [("elementwise", (n,)) for n in ELEMENTWISE_NUMELS]
    cases += [("fresh", (n,)) for n in FRESH_NUMELS]
    return cases


def run_case(bench: str, args: tuple[int, ...], device: Any, reps: int) -> Sample:
    """Run one case of :func:`compute_cases`."""
    fn = {"gemm": gemm_sample, "attention": attention_sample, "elementwise": elementwise_sample,
          "fresh": fresh_sample}[bench]
    return fn(*args, device=device, reps=reps)  # type: ignore[operator]
