"""Max-min fair rates of flows over capacitated links (progressive filling, vectorized).

A flow crosses a set of links; every link has a capacity (bytes/s). Progressive filling (Bertsekas
& Gallager, *Data Networks*, 6.5.2): raise the rate of every unfrozen flow equally until a link
saturates, freeze the flows that cross a saturated link, repeat. The result is the unique max-min
fair allocation: no flow can get more without taking from a flow whose rate is no larger.

A flow may also have a rate cap of its own (bytes/s; e.g. what one NCCL channel can drive): it
acts as a private link of that capacity, so the flow freezes once the level reaches its cap.

The flow-link incidence is given in CSR form: the links of flow f are
``link_ids[indptr[f]:indptr[f + 1]]``. A flow with no link is unconstrained (rate ``inf``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SATURATED = 1e-9  # a link whose spare capacity is below this fraction of its capacity is full


@dataclass(frozen=True)
class Incidence:
    """Flow-link incidence in CSR form plus, per entry, the flow it belongs to."""

    indptr: np.ndarray  # int64, len = flows + 1
    link_ids: np.ndarray  # int64, len = nnz

    @property
    def num_flows(self) -> int:
        """Number of flows."""
        return len(self.indptr) - 1

    def owner(self) -> np.ndarray:
        """Per entry, the index of its flow."""
        return np.repeat(np.arange(self.num_flows), np.diff(self.indptr))


def incidence_of(paths: list[tuple[int, ...]] | list[np.ndarray]) -> Incidence:
    """CSR incidence from per-flow link-id sequences (a link repeated in one path counts once)."""
    lengths = np.fromiter((len(p) for p in paths), np.int64, len(paths))
    indptr = np.zeros(len(paths) + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    flat = np.fromiter((e for p in paths for e in p), np.int64, int(indptr[-1]))
    return Incidence(indptr, flat)


def maxmin_rates(capacity: np.ndarray, inc: Incidence, cap: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of every flow, bytes/s.

    ``capacity``: bytes/s of every link id (all > 0). ``cap``: per-flow rate caps (bytes/s,
    ``inf`` = none). A flow that crosses no link gets its cap (``inf`` without one).
    """
    n = inc.num_flows
    cap = np.full(n, np.inf) if cap is None else np.asarray(cap, float)
    rates = np.zeros(n)
    if n == 0:
        return rates
    owner = inc.owner()
    links = inc.link_ids
    spare = capacity.astype(float).copy()
    frozen = np.diff(inc.indptr) == 0
    rates[frozen] = cap[frozen]
    level = 0.0
    while not frozen.all():
        live = ~frozen[owner]
        count = np.bincount(links[live], minlength=len(capacity))
        used = count > 0
        step = min(float(np.min(spare[used] / count[used])), float(np.min(cap[~frozen])) - level)
        level += step
        spare[used] -= step * count[used]
        full = used & (spare <= SATURATED * capacity)
        stop = cap <= level * (1 + SATURATED)
        stop[owner[live & full[links]]] = True
        stop &= ~frozen
        rates[stop] = level
        frozen |= stop
    return rates
