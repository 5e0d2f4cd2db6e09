"""Check a microbenchmark samples file (``<profile>.samples.json``) before anything is fitted.

``calibrate --samples`` refits from a file an earlier ``--microbench`` wrote; edited or damaged,
it must be a one-line error naming the sample and the field, not a ZeroDivisionError in a fit or
an OverflowError writing the profile. Each sample kind (``bench``) has its fields, as
:mod:`profiler.calibrate.microbench` writes them: counts are integers >= 1, times and sizes finite
numbers > 0, rates lists of them, names texts.
"""

from __future__ import annotations

from typing import Any

from core.errors import invalid
from core.settings import Rule, is_int, is_real


def _amount(value: Any) -> bool:
    return is_real(value) and 0 < value < 1e30


TEXT = Rule("expected a text", lambda v: isinstance(v, str) and bool(v))
COUNT = Rule("expected an integer >= 1", lambda v: is_int(v) and 1 <= v <= 2**53, type=int)
AMOUNT = Rule("expected a finite number > 0", _amount, type=float)
AMOUNTS = Rule("expected a list of finite numbers > 0", lambda v: isinstance(v, list) and bool(v) and all(map(_amount, v)))
FIELDS: dict[str, dict[str, Rule]] = {
    "gemm": {"m": COUNT, "n": COUNT, "k": COUNT, "flops": AMOUNT, "seconds": AMOUNT},
    "attention": {"seq": COUNT, "heads": COUNT, "head_dim": COUNT, "flops": AMOUNT, "seconds": AMOUNT},
    "elementwise": {"numel": COUNT, "bytes": AMOUNT, "seconds": AMOUNT},
    "collective": {"op": TEXT, "backend": TEXT, "ranks": COUNT, "bytes": AMOUNT, "seconds": AMOUNT},
    "memory_streams": {"processes": COUNT, "rates": AMOUNTS},
    "compute_streams": {"processes": COUNT, "rates": AMOUNTS},
    "fresh": {"numel": COUNT, "out_bytes": AMOUNT, "seconds": AMOUNT, "seconds_reused": AMOUNT},
}
"""Each sample kind's fields and what they hold."""
HOST: dict[str, Rule] = {"cpu_count": COUNT, "reps": COUNT}
"""The host keys the fits read (others are kept as written)."""


def check_samples(data: dict[str, Any]) -> None:
    """Raise a one-line ValueError naming ``samples[i].<field>`` (or ``host.<key>``) unless every
    sample has its kind's fields with valid values."""
    for i, sample in enumerate(data["samples"]):
        bench = sample.get("bench")
        if not isinstance(bench, str) or bench not in FIELDS:
            raise invalid(f"samples[{i}].bench", bench, "expected one of " + ", ".join(FIELDS))
        for field, rule in FIELDS[bench].items():
            if field not in sample:
                raise ValueError(f"samples[{i}].{field} is missing: a {bench} sample has {', '.join(FIELDS[bench])}")
            rule.check(f"samples[{i}].{field}", sample[field])
    host = data.get("host", {})
    for key, rule in HOST.items():
        if key in host:
            rule.check(f"host.{key}", host[key])
