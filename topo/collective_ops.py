"""The collective operations and nccl-tests' bus-bandwidth factor (NVIDIA/nccl-tests
doc/PERFORMANCE.md; hardware-facts 1.1): busbw = algbw x factor."""

from __future__ import annotations

from core.vocab import COLLECTIVES, Collective

OPS = COLLECTIVES


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` on ``n`` ranks."""
    if op == Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0
