"""What-if knobs: their syntax, validation and the set of items each one selects.

``--scale TARGET=FACTOR``: durations of the selected work times FACTOR (``0.5``, ``2x``).
``--link TARGET:bandwidth=FACTOR`` / ``TARGET:latency=FACTOR``: a link's bandwidth or latency
times FACTOR (twice the bandwidth halves the bandwidth part of a transfer; the latency part is
fitted per group and collective as the intercept of transfer time over message size);
``TARGET:latency=+SECONDS``: every transfer's result arrives SECONDS later (pure latency:
whatever waits for it waits longer; the stream that carried it is not held up).
``--drop TARGET``: the selected work takes no time (dropped communication also stops
synchronising its members). ``--remove-straggler R|auto``: see :mod:`profiler.replay.whatif`.

Scale and drop targets (prefix ``rank<R>.`` restricts one to rank R; ``rank<R>`` alone is
``rank<R>.compute``, a slow GPU):
- ``compute`` (every kernel / CPU op that is not communication or a copy), op classes
  ``gemm``, ``attention``, ``elementwise`` (by kernel/op name), phases ``fwd``, ``bwd``,
  ``bwd_input``, ``bwd_weight``, ``optimizer``, ``other``;
- ``memcpy``; ``host`` (time between items on a stream, CPU-side pieces and calls);
  ``waiting`` (reaction lags after dependencies, blocking calls after what they waited for);
- ``comm`` (every transfer), ``comm.<dim>`` or ``<dim>`` for dim in tp, pp, dp, cp, and
  ``comm.unmapped`` (transfers whose group has no known dimension).
Link targets: ``all``, a dim, ``unmapped``, ``intra`` / ``inter`` (the group stays inside one
node / spans nodes), ``pg:<process group name>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.vocab import Kind, Lane, OpClass
from profiler.kineto.groups import parse_ranks
from profiler.kineto.names import op_class
from profiler.replay.items import TRANSFER_SOURCES

DIMS = ("tp", "pp", "dp", "cp")
PHASES = (Kind.FWD, Kind.BWD, Kind.BWD_INPUT, Kind.BWD_WEIGHT, Kind.OPTIMIZER, Kind.OTHER)
OP_CLASSES = (OpClass.GEMM, OpClass.ATTENTION, OpClass.ELEMENTWISE)
BASE_TARGETS = ("compute", *OP_CLASSES, *PHASES, "memcpy", "host", "waiting", "comm", "comm.unmapped",
                *(f"comm.{d}" for d in DIMS), *DIMS)
LINK_TARGETS = ("all", *DIMS, "unmapped", "intra", "inter", "pg:<name>")
LINK_PARAMS = ("bandwidth", "latency")
_RANK_RE = re.compile(r"^rank(\d+)(?:\.(.+))?$")


def parse_factor(text: str, what: str) -> float:
    """``"0.5"`` or ``"2x"`` -> a factor >= 0 (ValueError naming ``what``)."""
    raw = text.strip().lower().removesuffix("x")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{what}: factor {text!r} is invalid: expected a number >= 0 such as 0.5 or 2x") from None
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{what}: factor {text!r} is invalid: expected a number >= 0 such as 0.5 or 2x")
    return value


def check_target(target: str, option: str) -> tuple[int | None, str]:
    """``[rank<R>.]<base>`` -> (R or None, base); ValueError listing valid targets."""
    m = _RANK_RE.match(target)
    rank, base = (int(m.group(1)), m.group(2) or "compute") if m else (None, target)
    if base not in BASE_TARGETS:
        raise ValueError(f"{option}: unknown target {target!r}; valid: {', '.join(BASE_TARGETS)}, "
                         "each optionally prefixed rank<R>. (rank<R> alone = rank<R>.compute)")
    return rank, base


@dataclass(frozen=True, kw_only=True)
class LinkKnob:
    """A link (group of transfers) with its bandwidth or latency scaled by ``factor``, or
    ``add_s`` seconds of latency added to each of its transfers."""

    target: str
    param: str
    factor: float = 1.0
    add_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """The what-if changes of one replay (empty: replay unchanged).

    Attributes:
        scale: (target, factor) pairs, applied in order.
        link: link bandwidth/latency changes.
        drop: targets whose work takes no time.
        remove_straggler: a rank, "auto", or None.
        gpus_per_node: ranks per node for the intra/inter link classes of GPU runs.
    """

    scale: tuple[tuple[str, float], ...] = ()
    link: tuple[LinkKnob, ...] = ()
    drop: tuple[str, ...] = ()
    remove_straggler: str | None = None
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        for target, factor in self.scale:
            check_target(target, "--scale")
            if factor < 0:
                raise ValueError(f"--scale: factor {factor} for {target} is invalid: expected >= 0")
        for target in self.drop:
            check_target(target, "--drop")
        for knob in self.link:
            _check_link(knob)
        if self.remove_straggler not in (None, "auto") and not str(self.remove_straggler).isdigit():
            raise ValueError(f"--remove-straggler: {self.remove_straggler!r} is invalid: expected a rank or 'auto'")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node={self.gpus_per_node} is invalid: expected >= 1")

    @property
    def empty(self) -> bool:
        """No change at all."""
        return not (self.scale or self.link or self.drop or self.remove_straggler)

    def describe(self) -> list[str]:
        """The knobs as the command line would write them."""
        out = [f"--scale {t}={f:g}" for t, f in self.scale]
        out += [f"--link {k.target}:{k.param}=" + (f"+{k.add_s:g}" if k.add_s else f"{k.factor:g}x")
                for k in self.link]
        out += [f"--drop {t}" for t in self.drop]
        out += [f"--remove-straggler {self.remove_straggler}"] if self.remove_straggler else []
        return out


def _check_link(knob: LinkKnob) -> None:
    if knob.param not in LINK_PARAMS:
        raise ValueError(f"--link: unknown parameter {knob.param!r}; valid: {', '.join(LINK_PARAMS)}")
    if not (knob.target in LINK_TARGETS[:-1] or (knob.target.startswith("pg:") and len(knob.target) > 3)):
        raise ValueError(f"--link: unknown target {knob.target!r}; valid: {', '.join(LINK_TARGETS)}")
    if not knob.factor > 0:
        raise ValueError(f"--link {knob.target}:{knob.param}: factor {knob.factor} is invalid: expected > 0")
    if knob.add_s and (knob.param != "latency" or knob.add_s < 0):
        raise ValueError(f"--link {knob.target}:{knob.param}=+{knob.add_s}: only latency takes added seconds (>= 0)")


def parse_scale(text: str) -> tuple[str, float]:
    """``"compute=0.5"`` -> ("compute", 0.5)."""
    target, sep, factor = text.partition("=")
    if not sep:
        raise ValueError(f"--scale {text!r} is invalid: expected TARGET=FACTOR, e.g. compute=0.5 or rank3=2")
    check_target(target.strip(), "--scale")
    return target.strip(), parse_factor(factor, f"--scale {target}")


def parse_link(text: str) -> LinkKnob:
    """``"dp:bandwidth=2x"`` -> LinkKnob(target="dp", param="bandwidth", factor=2.0)."""
    head, sep, factor = text.rpartition("=")
    target, colon, param = head.rpartition(":")
    if not sep or not colon:
        raise ValueError(f"--link {text!r} is invalid: expected TARGET:bandwidth=FACTOR or TARGET:latency=FACTOR, "
                         "e.g. dp:bandwidth=2x")
    if factor.strip().startswith("+"):
        knob = LinkKnob(target=target, param=param, add_s=parse_factor(factor.strip()[1:], f"--link {head}"))
    else:
        knob = LinkKnob(target=target, param=param, factor=parse_factor(factor, f"--link {head}"))
    _check_link(knob)
    return knob


@dataclass
class Selector:
    """Masks over replay items for knob targets (built once per model)."""

    items: pd.DataFrame
    world_size: int
    dims: np.ndarray = field(init=False)
    classes: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        lane = self.items["lane"].astype(str).to_numpy()
        self.dims = np.asarray([ln.split(".", 1)[1] if ln.startswith("comm.") else "unmapped" for ln in lane], dtype=object)
        self.classes = np.asarray([op_class(str(n)) for n in self.items["name"]], dtype=object)

    @property
    def transfers(self) -> np.ndarray:
        return (self.items["role"].to_numpy() == Lane.COMM) & self.items["source"].isin(TRANSFER_SOURCES).to_numpy()

    def mask(self, target: str) -> np.ndarray:
        """Items whose own duration the target selects (``host`` and ``waiting`` also scale the
        host delays and reaction lags of the rank's items, see :mod:`profiler.replay.whatif`)."""
        rank, base = check_target(target, "--scale")
        role = self.items["role"].to_numpy()
        kind = self.items["kind"].to_numpy()
        if base in ("compute", *OP_CLASSES, *PHASES):
            sel = role == "compute"
            sel &= (self.classes == base) if base in OP_CLASSES else (kind == base) if base in PHASES else True
        elif base == Lane.MEMCPY:
            sel = role == Lane.MEMCPY
        elif base == "host":
            sel = np.isin(role, ("host", "call")) & ~self.items["wait"].to_numpy(bool)
        elif base == "waiting":
            sel = self.items["wait"].to_numpy(bool)
        else:
            dim = base.removeprefix("comm").lstrip(".")
            sel = self.transfers & ((self.dims == dim) if dim else True)
        if rank is not None:
            sel = sel & (self.items["rank"].to_numpy() == rank)
        return np.asarray(sel, dtype=bool)

    def link_mask(self, target: str, gpus_per_node: int, one_host: bool) -> np.ndarray:
        """Transfers of a link target."""
        t = self.transfers
        if target == "all":
            return t
        if target in (*DIMS, "unmapped"):
            return t & (self.dims == target)
        if target.startswith("pg:"):
            return t & (self.items["pg"].astype(str).to_numpy() == target[3:])
        spans = np.zeros(len(self.items), dtype=bool)
        for i in np.flatnonzero(t):
            spans[i] = self._spans_nodes(int(i), gpus_per_node, one_host)
        return t & (spans if target == "inter" else ~spans)

    def _spans_nodes(self, i: int, gpus_per_node: int, one_host: bool) -> bool:
        if one_host:
            return False
        ranks = parse_ranks(self.items["pg_ranks"].iat[i]) or tuple(range(self.world_size))
        return len({r // gpus_per_node for r in ranks}) > 1
