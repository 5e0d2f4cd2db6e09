"""Thin a long curve to what a screen shows: per pixel-wide bin of x, its first, last, lowest and
highest points (min-max decimation). The envelope, and so every peak, stays exact; only detail
narrower than a bin is dropped. A 70B step's HBM curve (22k points per category) keeps <= 8k."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BINS = 1000


def decimate_steps(x: npt.ArrayLike, y: npt.ArrayLike, bins: int = BINS) -> npt.NDArray[np.int64]:
    """Sorted indices of the points to keep of the curve (x ascending, y at each x); all of them
    when there are at most 4 per bin."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = xs.size
    if n <= 4 * bins:
        return np.arange(n)
    span = xs[-1] - xs[0]
    bin_of = np.minimum(((xs - xs[0]) / span * bins).astype(np.int64), bins - 1) if span > 0 else np.zeros(n, np.int64)
    starts = np.flatnonzero(np.diff(bin_of, prepend=-1))
    ends = np.append(starts[1:], n)
    first, last = starts, ends - 1
    lowest = np.array([s + np.argmin(ys[s:e]) for s, e in zip(starts, ends, strict=True)], dtype=np.int64)
    highest = np.array([s + np.argmax(ys[s:e]) for s, e in zip(starts, ends, strict=True)], dtype=np.int64)
    return np.unique(np.concatenate([first, last, lowest, highest]))
