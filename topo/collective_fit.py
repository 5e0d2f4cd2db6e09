"""Measured collective costs: alpha-beta per operation and link class, as the backend runs them.

A :class:`CollectiveFit` replaces the analytic model of :mod:`topo.collectives` for one
operation on groups whose traffic stays on one kind of link (e.g. gloo all-reduce between CPU
processes through host memory, ``link="shm"``; NCCL ring all-reduce over NVLink). It is what
calibration measures: whatever algorithm the backend really runs is inside the fit (gloo has no
reduce-scatter and runs an all-reduce; NCCL picks ring or tree by size, so a profile may hold
one fit per algorithm and the cheaper one is used, as NCCL's tuner picks the faster).

    time(S, n) = alpha_s + alpha_per_rank_s * (n - 2) + S * bus_factor(op, n) / (busbw_GBps * 1e9)

with S the nccl-tests size (the whole buffer: the all-gather output, the reduce-scatter input;
the message for broadcast and p2p) and ``bus_factor`` the nccl-tests bus-bandwidth factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, p2p 1), so
``busbw_GBps`` reads like an nccl-tests busbw. Units: bytes, seconds, GB/s (1e9 bytes/s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import invalid, require_choice, require_number
from core.vocab import COLLECTIVES, OpClass
from topo.collective_ops import bus_factor
from topo.link import LINK_KINDS

FIT_OPS = (*COLLECTIVES, OpClass.P2P)
FIT_KEYS = ("op", "link", "algorithm", "ranks", "alpha_s", "alpha_per_rank_s", "busbw_GBps")


@dataclass(frozen=True, kw_only=True)
class CollectiveFit:
    """One measured alpha-beta cost (see the module docstring).

    Attributes:
        op: all_reduce | all_gather | reduce_scatter | broadcast | all_to_all | p2p.
        link: kind of the links the group's traffic uses (topo.link.LINK_KINDS).
        algorithm: the backend's algorithm this fit measured (a label, e.g. "gloo", "ring").
        ranks: group size the fit was measured on (0 = any size); a fit for the exact size is
            preferred over a general one.
        alpha_s: time of a call of 0 bytes on 2 ranks, seconds.
        alpha_per_rank_s: extra fixed time per rank beyond 2, seconds.
        busbw_GBps: bus bandwidth, GB/s.
    """

    op: str
    link: str
    algorithm: str = "measured"
    ranks: int = 0
    alpha_s: float
    alpha_per_rank_s: float = 0.0
    busbw_GBps: float

    def __post_init__(self) -> None:
        require_choice("op", self.op, FIT_OPS)
        require_choice("link", self.link, LINK_KINDS)
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise invalid("algorithm", self.algorithm, "expected a non-empty string")
        if isinstance(self.ranks, bool) or not isinstance(self.ranks, int) or self.ranks < 0 or self.ranks == 1:
            raise invalid("ranks", self.ranks, "expected 0 (any group size) or a group size >= 2")
        require_number("alpha_s", self.alpha_s)
        require_number("alpha_per_rank_s", self.alpha_per_rank_s)
        require_number("busbw_GBps", self.busbw_GBps, low=0.0, low_inclusive=False)

    def time_s(self, size_bytes: float, n: int) -> float:
        """Seconds for one call moving ``size_bytes`` (nccl-tests size) among ``n`` ranks."""
        if n < 2 or size_bytes <= 0:
            return 0.0
        return (self.alpha_s + self.alpha_per_rank_s * (n - 2)
                + size_bytes * bus_factor(self.op, n) / (self.busbw_GBps * 1e9))


def fit_from_mapping(data: Mapping[str, Any]) -> CollectiveFit:
    """A CollectiveFit from a TOML table; unknown keys are errors naming them."""
    for key in data:
        if key not in FIT_KEYS:
            raise ValueError(f"unknown key {key!r}; valid: {', '.join(FIT_KEYS)}")
    try:
        return CollectiveFit(**data)
    except TypeError:
        missing = [k for k in ("op", "link", "alpha_s", "busbw_GBps") if k not in data]
        raise invalid("collective", dict(data), "missing " + ", ".join(missing)) from None


class CollectiveFits:
    """Lookup of fits by (op, link); the cheapest algorithm wins for a given size."""

    def __init__(self, fits: Iterable[CollectiveFit]) -> None:
        self._by_key: dict[tuple[str, str], list[CollectiveFit]] = {}
        for fit in fits:
            self._by_key.setdefault((fit.op, fit.link), []).append(fit)

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def time_s(self, op: str, link: str, size_bytes: float, n: int) -> float | None:
        """Fitted seconds for ``op`` on ``link`` among ``n`` ranks, or None when no fit covers it
        (fits measured on ``n`` ranks first, then general ones, then the nearest group size)."""
        fits = self._by_key.get((op, link))
        if not fits:
            return None
        exact = [f for f in fits if f.ranks == n] or [f for f in fits if f.ranks == 0]
        if not exact:
            nearest = min({f.ranks for f in fits}, key=lambda r: (abs(r - n), r))
            exact = [f for f in fits if f.ranks == nearest]
        return min(f.time_s(size_bytes, n) for f in exact)
