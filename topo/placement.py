"""Rank placement: which device each rank of a (tp, cp, dp, pp) job runs on.

Ranks are numbered with the dimensions of ``order`` from innermost (consecutive ranks) to
outermost, as Megatron-LM and torchtitan's DeviceMesh do; rank r runs on global device r
(device = node * gpus_per_node + local). ``order=("tp", "cp", "dp", "pp")`` keeps TP inside a node;
putting "tp" outermost spreads TP across nodes (allowed; it just costs more).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from core.errors import invalid, require_positive_int

DIMENSIONS = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Sizes of the parallel dimensions and their nesting order (innermost first).

    Attributes:
        sizes: dimension -> degree; dimensions of ``order`` left out have size 1.
        order: dimension names from innermost to outermost (a permutation, no repeats).
    """

    sizes: Mapping[str, int]
    order: tuple[str, ...] = DIMENSIONS
    _strides: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        order = tuple(self.order)
        if len(set(order)) != len(order) or not order:
            raise invalid("order", ",".join(order), "distinct dimension names, innermost first")
        for dim, size in self.sizes.items():
            if dim not in order:
                raise invalid("sizes", dim, "dimension not in order=" + ",".join(order))
            require_positive_int(f"sizes[{dim!r}]", size)
        sizes = {dim: int(self.sizes.get(dim, 1)) for dim in order}
        strides, stride = {}, 1
        for dim in order:
            strides[dim], stride = stride, stride * sizes[dim]
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "sizes", MappingProxyType(sizes))
        object.__setattr__(self, "_strides", MappingProxyType(strides))

    def __hash__(self) -> int:
        return hash((tuple(self.sizes.items()), self.order))

    @property
    def world_size(self) -> int:
        """Total ranks (product of the sizes)."""
        return math.prod(self.sizes.values())

    def coords_of(self, rank: int) -> dict[str, int]:
        """Coordinate of ``rank`` along every dimension."""
        self._check_rank(rank)
        return {dim: rank // self._strides[dim] % self.sizes[dim] for dim in self.order}

    def rank_of(self, **coords: int) -> int:
        """Rank at ``coords``; dimensions of size 1 may be left out."""
        for dim in coords:
            if dim not in self.order:
                raise invalid("coords", dim, "expected one of " + ", ".join(self.order))
        rank = 0
        for dim in self.order:
            c = coords.get(dim)
            if c is None and self.sizes[dim] > 1:
                raise invalid(dim, None, f"coordinate needed (size {self.sizes[dim]})")
            c = 0 if c is None else c
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.sizes[dim]:
                raise invalid(dim, c, f"expected an int in [0, {self.sizes[dim]})")
            rank += c * self._strides[dim]
        return rank

    def grid_rank_function(self) -> Callable[[int, int, int, int], int]:
        """(tp, cp, dp, pp) -> rank, as :meth:`rank_of` computes it without validating each call
        (for the task-graph builder, which asks once per task)."""
        st, sc, sd, sp = (self._strides.get(d, 0) for d in DIMENSIONS)
        return lambda tp, cp, dp, pp: tp * st + cp * sc + dp * sd + pp * sp

    def coordinate_array(self, dim: str) -> np.ndarray:
        """Coordinate along ``dim`` of every rank, indexed by rank (int64 array)."""
        self._check_dim(dim)
        return (np.arange(self.world_size) // self._strides[dim]) % self.sizes[dim]

    def group(self, dim: str, rank: int) -> tuple[int, ...]:
        """Ranks that share every coordinate of ``rank`` except ``dim``, by ``dim`` coordinate."""
        self._check_dim(dim)
        coords = self.coords_of(rank)
        base = rank - coords[dim] * self._strides[dim]
        return tuple(base + i * self._strides[dim] for i in range(self.sizes[dim]))

    def groups(self, dim: str) -> list[tuple[int, ...]]:
        """All groups of ``dim`` (each as in :meth:`group`), ordered by their lowest rank."""
        self._check_dim(dim)
        shape = [self.sizes[d] for d in reversed(self.order)]  # outermost first (C order)
        ranks = np.arange(self.world_size).reshape(shape)
        axis = len(self.order) - 1 - self.order.index(dim)
        rows = np.moveaxis(ranks, axis, -1).reshape(-1, self.sizes[dim])
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        return [tuple(int(r) for r in row) for row in rows]

    def _check_dim(self, dim: str) -> None:
        if dim not in self.order:
            raise invalid("dim", dim, "expected one of " + ", ".join(self.order))

    def _check_rank(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise invalid("rank", rank, f"expected an int in [0, {self.world_size})")
