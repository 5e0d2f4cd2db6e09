"""The collective operations and nccl-tests' bus-bandwidth factor (NVIDIA/nccl-tests
doc/PERFORMANCE.md; hardware-facts 1.1): busbw = algbw x factor."""

from __future__ import annotations

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` on ``n`` ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0
