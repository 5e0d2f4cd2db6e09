"""Per-rank HBM over the step, by category: step functions built from the Timeline and the plan.

Categories (bytes per GPU):

- ``params``, ``grads``, ``optimizer``: the model states the GPU keeps (ZeRO sharding and
  ZeRO-Offload/Infinity, :func:`schedules.memory.offloaded_state_bytes`), allocated for the
  whole step (Megatron/DeepSpeed keep contiguous parameter and gradient buffers); torch's
  gradients from the rank's first backward of the step on (``zero_grad(set_to_none=True)``:
  :meth:`sim.memory.MemoryModel.gradient_events`).
- ``activations``: per (virtual stage, micro-batch), from its first forward span's start to its
  last backward span's end (W's share to the end of W); under activation offload absent between
  the end of its copy to the host and the start of its copy back (:class:`sim.memory.MemoryModel`).
- ``comm_buffers``: every communication span's message bytes during the span (TP/CP collectives,
  pipeline send/receive buffers, DP reductions); a ZeRO-3 all-gather's gathered parameters stay
  until the compute block that uses them ends. Kernels on a communication stream (kind "other":
  DeepSpeed's pre-divide and coalesced-fetch copy) hold no message.
- ``workspace``: the backward's working set on top of the stored activations (whole step):
  :meth:`sim.memory.MemoryModel.workspace`.

The peak is the highest total; ``fits`` compares it with HBM minus the reserve
(:data:`sim.summary.HBM_RESERVE_FRACTION`). Folded simulations hold one rank per pipeline stage,
standing for its peers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from core.vocab import Kind, Lane, Runtime
from schedules.passes.fsdp_gather import reshards_after_forward
from schedules.passes.fsdp_state import ROOT
from sim import intervals
from sim.memory import INSTANT_TOLERANCE, MemoryCurve, MemoryModel
from sim.span_arrays import EXACT_INTEGER_SUM, group_sums, label_mask, run_starts, stable_order
from sim.timeline import Timeline

if TYPE_CHECKING:  # ZeRO-3's gathers read the frame (importing pandas); other runs do not
    import pandas as pd

CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "workspace")
GROUP_KEYS = ["rank", "step", "stage", "microbatch", "layer"]


@dataclass(frozen=True)
class MemoryPeak:
    """A rank's HBM peak: its bytes, when first reached (seconds) and each category's bytes then."""

    bytes: float
    time_s: float
    at_peak: dict[str, float]


@dataclass(frozen=True)
class MemoryTimeline:
    """HBM of one rank: ``bytes[c][i]`` is category c's bytes from ``times_s[i]`` to the next time."""

    rank: int
    times_s: np.ndarray
    bytes: dict[str, np.ndarray]

    @cached_property
    def total(self) -> np.ndarray:
        """All categories at each time (bytes; computed once: the peak's properties read it)."""
        return np.sum([self.bytes[c] for c in CATEGORIES], axis=0)

    @property
    def peak_index(self) -> int:
        """Index of the first time the total reaches its maximum."""
        return int(np.argmax(self.total))

    @property
    def peak_bytes(self) -> float:
        """Highest total bytes."""
        return float(self.total[self.peak_index])

    @property
    def peak_time_s(self) -> float:
        """When the peak is first reached (seconds)."""
        return float(self.times_s[self.peak_index])

    def at_peak(self) -> dict[str, float]:
        """Bytes of each category at the peak (what makes it)."""
        i = self.peak_index
        return {c: float(self.bytes[c][i]) for c in CATEGORIES}

    def peak(self) -> MemoryPeak:
        """The peak's bytes, time and categories."""
        return MemoryPeak(self.peak_bytes, self.peak_time_s, self.at_peak())


def step_function(t: np.ndarray, d: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Cumulative value of (t, d) events (summed per instant in the order given), sampled just
    after each of ``times``."""
    return _sampled(*_instant_changes(t, d), times)


def _sampled(instants: np.ndarray, changes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The running total of ``changes`` (one per sorted instant), sampled just after each of ``times``."""
    if instants.size == 0:
        return np.zeros(times.size)
    level = np.cumsum(changes)
    idx = np.searchsorted(instants, times, side="right") - 1
    return np.where(idx >= 0, level[np.clip(idx, 0, None)], 0.0)


def _instant_changes(t: np.ndarray, d: np.ndarray, tolerance: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct instants of events (t, d), sorted, and the sum of ``d`` at each (in the
    events' order, as pandas adds a group). With ``tolerance``, instants closer than it to the
    previous one are first merged into the earliest of their cluster (:func:`sim.intervals.snap`)."""
    if t.size == 0:
        return t, d
    if (tolerance is not None and bool(np.all(d == np.trunc(d)))
            and float(np.abs(d).sum()) < EXACT_INTEGER_SUM):  # exact sums: one sort does the snap too
        by_time = np.argsort(t, kind="stable")
        st = t[by_time]
        new = np.empty(st.size, bool)
        new[0] = True
        np.greater(st[1:] - st[:-1], tolerance, out=new[1:])
        first = np.flatnonzero(new)
        return st[first], np.add.reduceat(d[by_time], first)
    if tolerance is not None:
        t = intervals.snap(t, tolerance)
    order = stable_order(t)
    if order is not None:
        t, d = t[order], d[order]
    starts = run_starts(t)
    return t[starts], group_sums(d, starts, reduceat=order is None)


@dataclass(frozen=True)
class _CommBuffers:
    """The communication spans that hold message bytes, ``rank`` sorted (Timeline order within
    a rank): each holds ``size`` bytes from ``start`` to ``free`` (seconds)."""

    rank: np.ndarray
    start: np.ndarray
    free: np.ndarray
    size: np.ndarray


def _comm_buffers(tl: Timeline, by_rank: bool = True, per_module: bool = False,
                  kept: frozenset[int] = frozenset()) -> _CommBuffers:
    """The communication spans that hold message bytes (+bytes at a span's start, freed at its
    end; a ZeRO-3 parameter all-gather's at the end of the compute block using it), in Timeline
    order or (``by_rank``) grouped by rank.
    ``per_module`` (DeepSpeed's ZeRO-3 fetches weight by weight, :mod:`schedules.passes.zero3_fetch`):
    a layer pass's gathered weight is released once the next weight of that pass has arrived
    (``release_sub_module`` after the submodule ran), the last one with the block, so at most the
    weight in use and the one arriving are held. ``kept``: FSDP units (layer ids, -1 the root)
    that keep their gathered parameters from the forward to their backward
    (:func:`schedules.passes.fsdp_gather.reshards_after_forward`): their gathers are held until the
    last compute span of their micro-batch's layer (the root: of the micro-batch)."""
    size = tl.column("bytes").astype(float, copy=False)
    lanes = tl.labels("lane")
    rows = np.flatnonzero(lanes.mask(lambda lane: lane.startswith("comm")) & (size > 0)
                          & ~tl.label_mask("kind", lambda kind: kind == Kind.OTHER))  # kernels, not messages
    free = tl.column("end_s").astype(float, copy=False)[rows]
    layer = tl.column("layer")[rows]
    dp_gathers = (lanes.mask(lambda lane: lane == Lane.DP)[rows]
                  & tl.label_mask("kind", lambda kind: kind == Kind.ALL_GATHER)[rows])
    gathers = dp_gathers & (layer >= 0)
    if gathers.any():
        df = tl.spans
        free[gathers] = _using_block_end(df[lanes.mask(lambda lane: lane == Lane.COMPUTE)], df.iloc[rows[gathers]])
        if per_module:
            free[gathers] = np.minimum(free[gathers], _next_in_pass_end(df.iloc[rows[gathers]]))
    if kept:
        held = dp_gathers & np.isin(layer, list(kept))
        if held.any():
            free[held] = np.maximum(free[held], _last_use_end(tl.spans, tl.spans.iloc[rows[held]]))
    rank = tl.column("rank").astype(np.int64, copy=False)[rows]
    order = stable_order(rank) if by_rank else None
    if order is not None:
        rows, rank, free = rows[order], rank[order], free[order]
    return _CommBuffers(rank, tl.column("start_s").astype(float, copy=False)[rows], free, size[rows])


def _last_use_end(df: pd.DataFrame, gathers: pd.DataFrame) -> np.ndarray:
    """For each all-gather, the end of the last compute span of its (rank, step, micro-batch,
    layer) — of its (rank, step, micro-batch) for the root's (layer -1); its own end if none."""
    compute = df[label_mask(df["lane"], lambda lane: lane == Lane.COMPUTE)]
    keys = ["rank", "step", "microbatch"]
    by_layer = compute.groupby(keys + ["layer"], observed=True)["end_s"].max()
    by_microbatch = compute.groupby(keys, observed=True)["end_s"].max()
    g = gathers.reset_index(drop=True)
    layered = g.join(by_layer.rename("use_end"), on=keys + ["layer"])["use_end"]
    rooted = g.join(by_microbatch.rename("use_end"), on=keys)["use_end"]
    use = np.where(g["layer"].to_numpy() < 0, rooted.to_numpy(float), layered.to_numpy(float))
    return np.where(np.isnan(use), g["end_s"].to_numpy(float), use)


def _next_in_pass_end(gathers: pd.DataFrame) -> np.ndarray:
    """For each all-gather, the end of the next all-gather of its (rank, step, stage,
    micro-batch, layer) by start time; +inf for the last."""
    order = gathers.assign(_pos=np.arange(len(gathers))).sort_values(GROUP_KEYS + ["start_s"], kind="stable")
    nxt = order.groupby(GROUP_KEYS, sort=False, observed=True)["end_s"].shift(-1).fillna(np.inf)
    out = np.empty(len(gathers))
    out[order["_pos"].to_numpy()] = nxt.to_numpy(float)
    return out


def _using_block_end(compute: pd.DataFrame, gathers: pd.DataFrame) -> np.ndarray:
    """For each all-gather, the end of the first compute block of its (rank, step, stage,
    micro-batch, layer) that ends after the gather does — the block that uses the gathered
    parameters, whether it starts after the gather (Megatron) or with work issued before it
    ends (FSDP2's copy-in, then the copy-out and the layer); the gather's end if none. A block
    is a run of consecutive compute spans with those labels."""
    spans = compute[GROUP_KEYS + ["start_s", "end_s"]].sort_values(["rank", "start_s"], kind="stable")
    changed = (spans[GROUP_KEYS].shift() != spans[GROUP_KEYS]).any(axis=1)
    run = changed.cumsum().rename("run")  # a block = a run of consecutive spans of one layer pass
    blocks = spans.groupby([run] + [spans[k] for k in GROUP_KEYS]).agg(start=("start_s", "min"), end=("end_s", "max"))
    blocks = blocks.reset_index().sort_values("end")
    left = gathers[GROUP_KEYS + ["end_s"]].reset_index().sort_values("end_s")
    import pandas as pd

    merged = pd.merge_asof(left, blocks[GROUP_KEYS + ["start", "end"]], left_on="end_s", right_on="end",
                           by=GROUP_KEYS, direction="forward")
    merged = merged.set_index("index").loc[gathers.index]
    return merged["end"].fillna(merged["end_s"]).to_numpy(float)


def _kept_units(memory: MemoryModel) -> frozenset[int]:
    """FSDP units whose gathered parameters stay from the forward to the backward (torch runtime,
    ZeRO-3; :func:`schedules.passes.fsdp_gather.reshards_after_forward`)."""
    plan, layers = memory.plan, memory.model.num_layers
    if plan.framework != Runtime.TORCH or plan.zero != 3:
        return frozenset()
    return frozenset(u for u in (ROOT, *range(layers)) if not reshards_after_forward(plan, layers, u))


def memory_timelines(memory: MemoryModel, tl: Timeline, curves: dict[int, MemoryCurve] | None = None,
                     rank_spans_s: dict[int, float] | None = None) -> dict[int, MemoryTimeline]:
    """Every simulated rank's HBM timeline (see the module docstring); ``curves``: the
    activation curves of ``tl`` when already computed; ``rank_spans_s``: per rank, the seconds
    that scale the one-instant tolerance (default its window in ``tl``; a shorter Timeline
    standing for a longer step gives the step's, :mod:`sim.window_step`)."""
    curves = curves if curves is not None else memory.activation_curves(tl)
    rank_pp = tl.meta.rank_pp
    ranks, lows, highs = rank_extents(tl)
    if not ranks:
        return {}
    buffers = _comm_buffers(tl, per_module=memory.plan.zero == 3 and memory.plan.zero3_unit == "module",
                            kept=_kept_units(memory))
    bounds = np.searchsorted(buffers.rank, [*ranks, np.iinfo(np.int64).max])
    grad_events = memory.gradient_events(tl)
    out = {}
    for i, r in enumerate(ranks):
        lo, hi = float(lows[i]), float(highs[i])
        curve = curves[r]
        a, b = bounds[i], bounds[i + 1]
        tolerance = INSTANT_TOLERANCE * (hi - lo if rank_spans_s is None else rank_spans_s[r])
        instants, changes = _instant_changes(np.concatenate([buffers.start[a:b], buffers.free[a:b]]),
                                             np.concatenate([buffers.size[a:b], -buffers.size[a:b]]),
                                             tolerance)  # starts, then ends
        grad_t, grad_d = grad_events.get(r, (np.zeros(0), np.zeros(0)))
        act_t, instants, grad_t = _one_instant(tolerance, curve.times_s, instants, grad_t)
        times = np.sort(np.concatenate([[lo, hi], act_t, instants, grad_t]), kind="stable")  # sorted runs
        times = times[np.concatenate([[True], times[1:] != times[:-1]])]  # np.unique
        act = step_function(act_t, np.diff(curve.bytes, prepend=0.0), times)
        instants, changes = _instant_changes(instants, changes)  # instants the snap made equal, summed
        states, _ = memory.state_bytes(rank_pp[r])
        ones = np.ones(times.size)
        ones[-1] = 0.0  # everything is freed at the window's end (so the plot closes)
        out[r] = MemoryTimeline(r, times, {
            "params": states.params * ones, "optimizer": states.optimizer * ones,
            "grads": states.grads * ones * (step_function(grad_t, grad_d, times) if r in grad_events else 1.0),
            "activations": act, "comm_buffers": _sampled(instants, changes, times),
            "workspace": memory.workspace(rank_pp[r]) * ones,
        })
    return out


def _one_instant(tolerance: float, *streams: np.ndarray) -> list[np.ndarray]:
    """The event times of several streams (activations, communication buffers, gradients), each
    moved to the earliest time of its cluster of times closer than ``tolerance`` over all of them
    (:func:`sim.intervals.snap`): an activation allocated as a buffer is freed is one instant,
    not a peak holding both, whichever way the round-off of the two times falls (an extended
    step shifts them by different multiples of its period). Streams sorted stay sorted."""
    snapped = intervals.snap(np.concatenate(streams), tolerance)
    return np.split(snapped, np.cumsum([s.size for s in streams[:-1]]))


def rank_extents(tl: Timeline) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The ranks of ``tl`` (in order of their spans) and each one's first span start and last
    span end (seconds; NaN skipped)."""
    rank = tl.column("rank").astype(np.int64, copy=False)
    starts, ends = tl.column("start_s").astype(float, copy=False), tl.column("end_s").astype(float, copy=False)
    order = stable_order(rank)
    if order is not None:
        rank, starts, ends = rank[order], starts[order], ends[order]
    first = run_starts(rank)
    if not first.size:
        return [], np.zeros(0), np.zeros(0)
    return rank[first].tolist(), np.fmin.reduceat(starts, first), np.fmax.reduceat(ends, first)
