"""Check a microbenchmark samples file (``<profile>.samples.json``) before anything is fitted.

``calibrate --samples`` refits from a file an earlier ``--microbench`` wrote; edited or damaged,
it must be a one-line error naming the sample and the field, not a ZeroDivisionError in a fit or
an OverflowError writing the profile. Each sample kind (``bench``) has its fields, as
:mod:`profiler.calibrate.microbench` writes them: counts are integers >= 1, times and sizes finite
numbers > 0, rates lists of them, names texts.
"""

from __future__ import annotations

import math
from typing import Any

from core.errors import invalid

COUNT, AMOUNT, TEXT, AMOUNTS = "count", "amount", "text", "amounts"
FIELDS: dict[str, dict[str, str]] = {
    "gemm": {"m": COUNT, "n": COUNT, "k": COUNT, "flops": AMOUNT, "seconds": AMOUNT},
    "attention": {"seq": COUNT, "heads": COUNT, "head_dim": COUNT, "flops": AMOUNT, "seconds": AMOUNT},
    "elementwise": {"numel": COUNT, "bytes": AMOUNT, "seconds": AMOUNT},
    "collective": {"op": TEXT, "backend": TEXT, "ranks": COUNT, "bytes": AMOUNT, "seconds": AMOUNT},
    "memory_streams": {"processes": COUNT, "rates": AMOUNTS},
    "compute_streams": {"processes": COUNT, "rates": AMOUNTS},
    "fresh": {"numel": COUNT, "out_bytes": AMOUNT, "seconds": AMOUNT, "seconds_reused": AMOUNT},
}
"""Each sample kind's fields and what they hold."""
HOST: dict[str, str] = {"cpu_count": COUNT, "reps": COUNT}
"""The host keys the fits read (others are kept as written)."""


def check_samples(data: dict[str, Any]) -> None:
    """Raise a one-line ValueError naming ``samples[i].<field>`` (or ``host.<key>``) unless every
    sample has its kind's fields with valid values."""
    for i, sample in enumerate(data["samples"]):
        bench = sample.get("bench")
        if not isinstance(bench, str) or bench not in FIELDS:
            raise invalid(f"samples[{i}].bench", bench, "expected one of " + ", ".join(FIELDS))
        for field, kind in FIELDS[bench].items():
            if field not in sample:
                raise ValueError(f"samples[{i}].{field} is missing: a {bench} sample has {', '.join(FIELDS[bench])}")
            _check(f"samples[{i}].{field}", sample[field], kind)
    host = data.get("host", {})
    for key, kind in HOST.items():
        if key in host:
            _check(f"host.{key}", host[key], kind)


def _check(name: str, value: Any, kind: str) -> None:
    if kind == TEXT:
        ok = isinstance(value, str) and bool(value)
    elif kind == COUNT:
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 2**53
    elif kind == AMOUNT:
        ok = _amount(value)
    else:
        ok = isinstance(value, list) and bool(value) and all(_amount(v) for v in value)
    if not ok:
        raise invalid(name, value, {TEXT: "expected a text", COUNT: "expected an integer >= 1",
                                    AMOUNT: "expected a finite number > 0",
                                    AMOUNTS: "expected a list of finite numbers > 0"}[kind])


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 < value < 1e30
