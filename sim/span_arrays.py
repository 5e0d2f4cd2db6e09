"""Numpy helpers for the Timeline metrics and memory curves: column masks and sort-based grouping,
and the vocabularies that code a Timeline's label columns (:class:`SpanVocab`).

A Timeline holds up to millions of spans; grouping them with pandas (one sub-frame per rank) or
hashing several key columns costs more than the arithmetic. These helpers work on numpy columns:
groups are runs of a stable sort, so each group keeps its spans in their order in the Timeline,
and :func:`group_sums` adds a group's values in that order as pandas' ``groupby().sum()`` does
(Kahan-compensated), so results match the pandas formulation bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.task_columns import first_seen

if TYPE_CHECKING:  # only a caller holding a frame passes a Series (pandas already imported)
    import pandas as pd

EXACT_INTEGER_SUM = 2.0**53  # integer-valued float64 sums below this are exact in any order


@dataclass(frozen=True)
class Labels:
    """A label column as small-int ``codes`` into ``categories`` (-1: missing), as a pandas
    categorical holds it."""

    codes: np.ndarray
    categories: list[str]

    def mask(self, keep: Callable[[str], bool]) -> np.ndarray:
        """Rows whose label satisfies ``keep``, which is called once per distinct label."""
        table = np.zeros(len(self.categories) + 1, bool)  # the last entry: code -1 (a missing label)
        table[:-1] = [bool(keep(str(name))) for name in self.categories]
        return table[self.codes]

    def equal(self, label: str) -> np.ndarray:
        """Rows whose label is ``label`` (without calling a test per distinct label)."""
        try:
            return self.codes == self.categories.index(label)
        except ValueError:
            return np.zeros(self.codes.shape, bool)


def label_mask(column: pd.Series, keep: Callable[[str], bool]) -> np.ndarray:
    """Rows whose label (a categorical or string column, e.g. ``lane``) satisfies ``keep``,
    which is called once per distinct label."""
    return frame_labels(column).mask(keep)


def frame_labels(column: pd.Series) -> Labels:
    """A categorical or string column of a frame as :class:`Labels`."""
    import pandas as pd

    values = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    return Labels(values.cat.codes.to_numpy(), [str(name) for name in values.cat.categories])


def stable_order(key: np.ndarray) -> np.ndarray | None:
    """The stable argsort of ``key``, or None when ``key`` is already sorted (nondecreasing)."""
    if key.size < 2 or bool(np.all(key[1:] >= key[:-1])):
        return None
    return np.argsort(key, kind="stable")


def run_starts(sorted_key: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values of ``sorted_key`` starts."""
    if sorted_key.size == 0:
        return np.zeros(0, np.int64)
    return np.concatenate([[0], np.flatnonzero(sorted_key[1:] != sorted_key[:-1]) + 1])


def pair_key(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """One int64 per (major, minor) integer pair, ordered as the pairs are (lexicographically)."""
    if major.size == 0:
        return np.zeros(0, np.int64)
    lo = int(minor.min())
    span = int(minor.max()) - lo + 1
    base = int(major.min())
    if (int(major.max()) - base + 1) * span >= 2**62:
        raise ValueError(f"pair_key: labels span {span} x {int(major.max()) - base + 1}, too wide for int64")
    return (major.astype(np.int64, copy=False) - base) * span + (minor.astype(np.int64, copy=False) - lo)


def group_sums(values: np.ndarray, first: np.ndarray, *, reduceat: bool = False) -> np.ndarray:
    """The sum of each group ``values[first[g]:first[g + 1]]`` (the last to the end), as pandas'
    grouped ``sum`` computes it: with ``reduceat`` (the groups' keys were already sorted in the
    frame and no value is NaN) numpy's ``add.reduceat``, else adding in the order given with
    Kahan compensation, skipping NaN. Integer-valued sums below 2**53 are exact either way."""
    n, groups = values.size, first.size
    if groups == 0:
        return np.zeros(0)
    nan = bool(np.isnan(values).any())
    if not nan and (reduceat or (bool(np.all(values == np.trunc(values)))
                                 and float(np.abs(values).sum()) < EXACT_INTEGER_SUM)):
        return np.add.reduceat(values, first)
    counts = np.diff(np.append(first, n))
    group = np.repeat(np.arange(groups), counts)
    position = np.arange(n) - np.repeat(first, counts)
    order = np.argsort(position, kind="stable")  # every group's j-th value, j = 0, 1, ...
    bounds = np.searchsorted(position[order], np.arange(int(counts.max()) + 1))
    total, compensation = np.zeros(groups), np.zeros(groups)
    for j in range(bounds.size - 1):
        take = order[bounds[j]:bounds[j + 1]]
        v = values[take]
        valid = ~np.isnan(v)
        g, v = group[take][valid], v[valid]
        y = v - compensation[g]
        t = total[g] + y
        c = (t - total[g]) - y
        compensation[g] = np.where(np.isnan(c), 0.0, c)
        total[g] = t
    return total


class SpanVocab:
    """String -> small-int codes, for building categorical columns."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        code = self.codes.get(value)  # a StrEnum member finds its value's entry
        if code is None:
            code = self.codes[str(value)] = len(self.codes)
        return code

    def codes_of(self, values: list[str]) -> list[int]:
        """The code of each value (new values get the next codes, in order)."""
        codes, out = self.codes, []
        for v in values:
            c = codes.get(v)
            if c is None:
                c = codes[str(v)] = len(codes)
            out.append(c)
        return out

    def recode(self, codes: np.ndarray, value_of: Callable[[int], str]) -> np.ndarray:
        """``codes`` (a column coded against its own table, ``value_of`` naming each code) as this
        vocabulary codes them, its values entered in order of first appearance: the codes
        :meth:`codes_of` would give the column's values one by one."""
        recoded, originals = first_seen(codes)
        offset = len(self.codes)
        for v in originals.tolist():
            self.codes.setdefault(str(value_of(v)), len(self.codes))
        if len(self.codes) != offset + originals.size:
            raise ValueError("a column's values are already coded, or not distinct in its table")
        return recoded + offset

    def categorical(self, codes: np.ndarray) -> Labels:
        """A label column of ``codes`` (a pandas categorical once the Timeline's frame is built)."""
        return Labels(codes, list(self.codes))
