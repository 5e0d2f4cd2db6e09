"""What a sweep explores: the model and training run, the cluster designs, and the plan space.

A :class:`SweepSpec` is saved as ``spec.json`` in the sweep directory, so ``--resume`` rebuilds
exactly the same sweep. Default plan space (each flag of ``trainsim explore`` narrows or widens it):

- tp: divisors of the model's heads that fit in one node (<= GPUs per node) and respect the
  KV-head rule; ``--tp`` may list larger ones (TP across nodes is allowed, just slow).
- pp: divisors of the layers (``--uneven-stages`` adds every pp up to layers/2 with uneven stages).
- cp: 1.  dp: whatever the GPU count leaves.
- schedules: 1f1b, interleaved (vpp 2 and 4), zb-h1, and for an MoE model dualpipev; pp = 1 runs
  1f1b only.
- ep (MoE models): powers of two dividing the experts and dp (``ep`` lists others).
- micro-batch size 1, 2, 4; ZeRO 0-3 (ZeRO 0 only when there is no data parallelism).
- sequence parallelism on whenever tp > 1 (same communication volume as plain TP, activations
  sharded by tp); recomputation none or full. "selective" is left out by default because with
  flash attention (the default kernel) it recomputes nothing and stores the same activations.
- the stack: Megatron-Core's defaults, or a framework preset's choices under every plan
  (``--framework``; a swept dimension overrides the preset's value).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from core.errors import invalid, require_choice
from core.settings import integer, is_real
from schedules.frameworks import get_framework
from schedules.plan import ParallelPlan
from schedules.plan.layout import SCHEDULE_NAMES
from schedules.plan.precision import DTYPES
from schedules.plan.runtime import RECOMPUTE_KINDS

DEFAULT_SCHEDULES = ("1f1b", "interleaved", "zb-h1")  # an MoE model adds its layer kind's overlap_schedules (DualPipeV)
MICROBATCH_SIZES = (1, 2, 4)  # the micro-batch sizes swept by default (also tried for a published row that omits its own)
DEFAULTABLE = ("tokens", "global_batch")  # sweep inputs that have a default (sim.explore.defaults)


COUNT = integer(1, 1_000_000_000)  # a count in a sweep file, bounded as the command line bounds it


def _ints(field: str, values: tuple[int, ...] | None) -> None:
    if values is None:
        return
    if not isinstance(values, tuple) or not values:
        raise invalid(field, values, "give at least one value")
    for v in values:
        COUNT.check(field, v)


def _texts(field: str, values: Any) -> None:
    if not isinstance(values, tuple) or not all(isinstance(v, str) and v for v in values):
        raise invalid(field, values, "expected a list of names")


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """The plan dimensions to sweep (``None``: derived from the model and cluster, see module doc)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1,)
    vpp: tuple[int, ...] = (2, 4)
    microbatch_sizes: tuple[int, ...] = MICROBATCH_SIZES
    zero: tuple[int, ...] = (0, 1, 2, 3)
    sequence_parallel: tuple[bool, ...] = (True,)
    recompute: tuple[str, ...] = ("none", "full")
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    uneven_stages: bool = False
    dtype: str = "bf16"
    ep: tuple[int, ...] | None = None
    framework_preset: str | None = None  # a stack's preset (schedules.frameworks): its fields under every plan

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "vpp", "microbatch_sizes", "ep"):
            _ints(name, getattr(self, name))
        for name in ("zero", "recompute", "schedules", "sequence_parallel"):
            if not isinstance(getattr(self, name), tuple):
                raise invalid(name, getattr(self, name), "expected a list of values")
        for z in self.zero:
            require_choice("zero", z, (0, 1, 2, 3))
        for sp in self.sequence_parallel:
            if not isinstance(sp, bool):
                raise invalid("sequence_parallel", sp, "expected true or false")
        if not isinstance(self.uneven_stages, bool):
            raise invalid("uneven_stages", self.uneven_stages, "expected true or false")
        if self.framework_preset is not None and not isinstance(self.framework_preset, str):
            raise invalid("framework_preset", self.framework_preset, "expected a framework preset name")
        for r in self.recompute:
            require_choice("recompute", r, RECOMPUTE_KINDS)
        for s in self.schedules:
            require_choice("schedules", s, SCHEDULE_NAMES)
        for name in ("zero", "recompute", "schedules", "sequence_parallel"):
            if not getattr(self, name):
                raise invalid(name, getattr(self, name), "give at least one value")
        require_choice("dtype", self.dtype, DTYPES)
        if self.framework_preset is not None:
            get_framework(self.framework_preset)  # an unknown name lists the valid ones

    @cached_property
    def preset_fields(self) -> dict[str, Any]:
        """The plan fields of the sweep's framework preset (none without one); a swept dimension
        (ZeRO, sequence parallelism, recompute, ...) overrides its value."""
        return get_framework(self.framework_preset).plan_fields() if self.framework_preset else {}

    def plan(self, global_batch: int, **fields: Any) -> ParallelPlan:
        """The plan of one grid point: the preset's fields, then the point's ``fields``, at the
        sweep's global batch, dtype and stage rule (the one place a swept plan is made)."""
        return ParallelPlan(**{**self.preset_fields, **fields, "global_batch": global_batch, "dtype": self.dtype,
                               "uneven_stages": self.uneven_stages})


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """One sweep.

    Attributes:
        model: model preset name; ``seq_len`` overrides its sequence length.
        tokens: tokens to train on (time and cost to train are for this many).
        global_batch: sequences per optimizer step, fixed across plans and designs.
        clusters: cluster designs: preset names or cluster TOML files.
        gpus: GPU counts to try for every design that ``sizes`` does not size.
        sizes: design -> its own GPU counts (``dgx-h100:512``), overriding ``gpus``.
        prices: design -> USD per GPU-hour, overriding the design's own price.
        space: the plan dimensions.
        defaulted: inputs the user did not give, filled by :mod:`sim.explore.defaults`
            (``tokens``, ``global_batch``), so outputs can say so.
    """

    model: str
    tokens: float
    global_batch: int
    clusters: tuple[str, ...]
    gpus: tuple[int, ...] = ()
    sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    prices: tuple[tuple[str, float], ...] = ()
    seq_len: int | None = None
    space: SearchSpace = dataclasses.field(default_factory=SearchSpace)
    defaulted: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise invalid("model", self.model, "expected a model preset name")
        if not (is_real(self.tokens) and self.tokens > 0):
            raise invalid("tokens", self.tokens, "expected a number of tokens > 0, e.g. 1e12")
        object.__setattr__(self, "tokens", float(self.tokens))
        COUNT.check("global_batch", self.global_batch)
        if self.seq_len is not None:
            COUNT.check("seq_len", self.seq_len)
        if self.gpus:
            _ints("gpus", self.gpus)
        _texts("clusters", self.clusters)
        if not self.clusters:
            raise invalid("clusters", self.clusters, "give at least one cluster design")
        for field, pairs in (("sizes", self.sizes), ("prices", self.prices)):
            for pair in pairs:
                if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise invalid(field, pair, "expected [design, value] pairs")
        for name, counts in self.sizes:
            if name not in self.clusters:
                raise invalid("sizes", name, "name one of the swept clusters: " + ", ".join(self.clusters))
            _ints("gpus", counts)
        unsized = [d for d in self.clusters if not self.gpus_of(d)]
        if unsized:
            raise invalid("cluster", unsized[0], f"give its GPU count, e.g. {unsized[0]}:512, or --gpus for every design")
        for name in self.defaulted:
            require_choice("defaulted", name, DEFAULTABLE)
        for name, usd in self.prices:
            if name not in self.clusters:
                raise invalid("price", name, "name one of the swept clusters: " + ", ".join(self.clusters))
            if not is_real(usd) or usd < 0:
                raise invalid("price", usd, "expected a price >= 0")

    def gpus_of(self, design: str) -> tuple[int, ...]:
        """The GPU counts swept for ``design``: its own (``sizes``) or the shared ``gpus``."""
        return dict(self.sizes).get(design, self.gpus)

    def points(self) -> list[tuple[str, int]]:
        """Every (design, GPU count) of the sweep, designs in the order given."""
        return [(d, g) for d in self.clusters for g in self.gpus_of(d)]

    def price_of(self, design: str) -> float | None:
        """The user's price for ``design`` in USD per GPU-hour, if one was given."""
        return dict(self.prices).get(design)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists for tuples)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        """Inverse of :meth:`to_dict` (a ValueError naming the key when ``data`` or its ``space``
        is not an object)."""
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        if not isinstance(data.get("space"), dict):
            raise invalid("space", data.get("space"), "expected an object of the plan space's fields")
        space: dict[str, Any] = {k: _tuples(v) for k, v in data["space"].items()}
        rest: dict[str, Any] = {k: _tuples(v) for k, v in data.items() if k != "space"}
        return cls(**rest, space=SearchSpace(**space))


def _tuples(value: Any) -> Any:
    """JSON lists back to (nested) tuples."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
