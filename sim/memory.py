"""Memory per GPU: model states (ZeRO formulas), buffers, and activations over the step.

Activations are read off the Timeline, so they follow the schedule that actually ran: a
micro-batch's activations for a virtual stage are allocated when its forward starts and freed
when its backward ends (for split-backward schedules, the part the weight gradient needs is
freed when W ends). GPipe therefore holds m micro-batches at its peak and 1F1B at most p on
stage 0, without either being assumed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from core.vocab import BACKWARD_KINDS, Kind, Lane, Offload, Runtime
from schedules.actions import PipelineSchedule
from schedules.fp8 import weight_copy_bytes
from schedules.layer_kinds import layer_kind, stage_activation_bytes, stage_layer_activation_bytes
from schedules.memory import (
    FP32_BYTES,
    HostStateBytes,
    ModelStateBytes,
    fsdp_state_bytes,
    gradient_buffer_bytes,
    head_working_bytes,
    offloaded_state_bytes,
    optimizer_state_bytes,
    plan_activation_config,
    weight_grad_retained_fraction,
)
from schedules.model import ModelSpec
from schedules.passes.act_offload import ACT_TO_DEVICE, ACT_TO_HOST
from schedules.passes.zero3_fetch import layer_modules
from schedules.plan import ParallelPlan
from schedules.stage_ops import activation_message_bytes
from schedules.stages import StageInfo, plan_stages
from sim import intervals
from sim.span_arrays import group_sums, run_starts
from sim.timeline import Timeline

GIB = 1024**3
INSTANT_TOLERANCE = 1e-9  # events closer than this share of the timeline's span happen at one instant


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes held by one GPU at its peak, by category."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        """All categories, bytes."""
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    def gib(self) -> dict[str, float]:
        """The categories in GiB, rounded to 1e-4."""
        return {k: round(getattr(self, k) / GIB, 4) for k in ("params", "grads", "optimizer", "activations", "buffers")}


@dataclass(frozen=True)
class MemoryCurve:
    """Activation bytes held by one rank over time: step function (times_s, bytes)."""

    rank: int
    times_s: np.ndarray
    bytes: np.ndarray

    @property
    def peak(self) -> float:
        """Highest activation bytes held."""
        return float(self.bytes.max()) if self.bytes.size else 0.0


class MemoryModel:
    """Per-GPU memory of a job: static parts from formulas, activations from a Timeline."""

    def __init__(self, model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule) -> None:
        self.model, self.plan, self.schedule = model, plan, schedule
        self.stages: list[StageInfo] = plan_stages(model, plan)
        self.cfg = plan_activation_config(plan)
        self.retained = weight_grad_retained_fraction(model) if schedule.split_backward else 0.0
        self.shard = plan.zero_shard  # the DP x CP group, or one replica's share of it (hybrid sharding)

    @property
    def layers_on_host(self) -> bool:
        """Does each layer's checkpoint leave HBM as soon as the layer's forward ends
        (``activation_offload_unit="layer"``: DeepSpeed's CPU checkpointing)?"""
        return self.plan.activation_copies == "layer"

    def stage_activation_bytes(self, stage: StageInfo) -> float:
        """Activations one micro-batch leaves in HBM on ``stage`` after its forward (bytes):
        without the blocks' share when each layer's checkpoint went to the host."""
        total = stage_activation_bytes(self.model, self.plan, stage)
        return total - stage_layer_activation_bytes(self.model, self.plan, stage) if self.layers_on_host else total

    def rank_params(self, pp_rank: int) -> float:
        """Parameters held by a pipeline rank's chunks on one TP rank (before ZeRO)."""
        return sum(self.stages[self.schedule.stage_of(pp_rank, c)].params_local for c in range(self.schedule.vpp))

    def buffers(self, pp_rank: int) -> float:
        """Communication and working buffers (bytes): gradient buckets, ZeRO-3 gathered units (a
        layer, or DeepSpeed's largest weight matrix),
        pipeline send/receive buffers, and the backward's working set (:meth:`workspace`)."""
        total = 0.0
        layer_params = self.stages[0].layer_params_local
        if self.shard > 1 and self.plan.zero < 3:
            total += 2 * min(self.plan.dp_bucket_bytes, 2 * self.rank_params(pp_rank))
        if self.shard > 1 and self.plan.zero == 3:
            unit = layer_params
            if self.plan.zero3_unit == "module":  # DeepSpeed fetches each weight matrix apart
                unit = min(unit, max(params for _, params in layer_modules(self.model, self.plan.tp)))
            total += 2 * 2 * unit + 2 * unit  # two gathered units + one unit of grads
        if self.plan.pp > 1:
            total += 4 * activation_message_bytes(self.model, self.plan)
        return total + self.workspace(pp_rank)

    def breakdown(self, pp_rank: int, activation_peak: float) -> MemoryBreakdown:
        """Peak memory of a GPU of pipeline rank ``pp_rank`` given its activation peak (bytes)."""
        states, _ = self.state_bytes(pp_rank)
        return MemoryBreakdown(params=states.params, grads=states.grads, optimizer=states.optimizer,
                               activations=activation_peak, buffers=self.buffers(pp_rank))

    def state_bytes(self, pp_rank: int) -> tuple[ModelStateBytes, HostStateBytes]:
        """(HBM, host) model-state bytes of a GPU of pipeline rank ``pp_rank`` (ZeRO + offload)."""
        p = self.plan
        hbm, host = offloaded_state_bytes(self.rank_params(pp_rank), p.zero, self.shard, p.offload, p.offload_device,
                                          grad_bytes=gradient_buffer_bytes(p), optimizer_bytes=optimizer_state_bytes(p))
        if p.framework == Runtime.TORCH and p.zero == 3 and p.offload == Offload.NONE:
            storage = FP32_BYTES if p.master_weights else p.element_bytes
            hbm = fsdp_state_bytes(self.rank_params(pp_rank), self.shard, storage)
        hbm = dataclasses.replace(hbm, params=hbm.params + weight_copy_bytes(p) * self.rank_params(pp_rank))
        stages = [self.stages[self.schedule.stage_of(pp_rank, c)] for c in range(self.schedule.vpp)]
        experts = layer_kind(self.model).expert_states(p, stages)  # sharded over the expert-data-parallel group
        if experts is None:
            return hbm, host
        return ModelStateBytes(params=hbm.params + experts.params, grads=hbm.grads + experts.grads,
                               optimizer=hbm.optimizer + experts.optimizer), host

    def workspace(self, pp_rank: int = 0) -> float:
        """Working set a GPU of pipeline rank ``pp_rank`` holds on top of its stored activations
        while a backward runs (bytes; counted for the whole step, an upper bound): the largest of
        one block's rematerialized activations (full recomputation, or torchtitan's per-op SAC:
        :func:`schedules.memory.recompute_working_bytes`) and, on the rank holding the last
        stage, the loss backward's (:func:`schedules.memory.head_working_bytes`); they never
        overlap in time on one GPU."""
        mbs = self.plan.microbatch_size
        head = head_working_bytes(self.model, mbs, self.cfg) if self._holds_last_stage(pp_rank) else 0.0
        block = layer_kind(self.model).working_bytes(self.model, self.plan, self.cfg)
        return max(block, head)

    def _holds_last_stage(self, pp_rank: int) -> bool:
        """Whether pipeline rank ``pp_rank`` runs the last virtual stage (the head and the loss)."""
        return any(self.stages[self.schedule.stage_of(pp_rank, c)].last for c in range(self.schedule.vpp))

    def activation_curves(self, tl: Timeline, sizes: dict[int, float] | None = None,
                          span_s: float | None = None) -> dict[int, MemoryCurve]:
        """Activation bytes held by every rank over the Timeline.

        A (step, stage, micro-batch) is allocated at its first forward span's start and freed at
        its last backward span's end (the weight-gradient share at the end of its W, if any).
        ``sizes``: bytes per micro-batch by stage index (default: what stays in HBM). ``span_s``:
        the seconds that scale the one-instant tolerance (default the Timeline's span; a shorter
        Timeline standing for a longer step gives the step's, :mod:`sim.window_step`).
        """
        kinds = tl.labels("kind")
        rows = np.flatnonzero(kinds.mask(lambda k: k == Kind.FWD or k == Kind.BWD_WEIGHT or k in BACKWARD_KINDS))
        unit = _unit_keys(tl, rows)
        kind = kinds.codes[rows]
        starts, ends = _floats(tl, "start_s")[rows], _floats(tl, "end_s")[rows]

        def of_kinds(*names: str) -> np.ndarray:
            return np.isin(kind, [i for i, name in enumerate(kinds.categories) if name in names])

        alloc = unit.reduce(of_kinds("fwd"), starts, np.fmin)
        free_b = unit.reduce(of_kinds(*BACKWARD_KINDS), ends, np.fmax)
        free_w = unit.reduce(of_kinds("bwd_weight"), ends, np.fmax)
        if sizes is None:
            sizes = {st.index: self.stage_activation_bytes(st) for st in self.stages}
        size = _lookup(sizes, alloc.stage)
        t_b, t_w = free_b.at(alloc.key), free_w.at(alloc.key)
        kept = np.where(~np.isnan(t_w), size * self.retained, 0.0)
        off_rank, off_t, off_d = self._offload_events(tl, sizes)
        rank = np.concatenate([alloc.rank, alloc.rank, alloc.rank, off_rank])
        t = np.concatenate([alloc.value, t_b, t_w, off_t])
        d = np.concatenate([size, -(size - kept), -kept, off_d])
        keep = ~np.isnan(t) & (d != 0)
        rank, t, d = rank[keep], t[keep], d[keep]
        t = intervals.snap(t, _instant(tl, span_s))  # one instant
        order = np.lexsort((d, t, rank))  # frees first at ties
        rank, t, d = rank[order], t[order], d[order]
        new = np.ones(t.size, bool)
        new[1:] = (rank[1:] != rank[:-1]) | (t[1:] != t[:-1])
        group = np.flatnonzero(new)  # one value per (rank, instant)
        level = group_sums(d, group, reduceat=True)
        rank, t = rank[group], t[group]
        curves = {}
        bounds = run_starts(rank).tolist()
        for a, b in zip(bounds, [*bounds[1:], rank.size], strict=True):
            r = int(rank[a])
            curves[r] = MemoryCurve(r, t[a:b], np.cumsum(level[a:b]))
        for r in tl.ranks:
            curves.setdefault(r, MemoryCurve(r, np.zeros(0), np.zeros(0)))
        return curves

    def gradient_events(self, tl: Timeline) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per rank, (times_s, share) events of the gradient bytes it holds, a step function of
        0/1 (ranks absent: held the whole step).

        Torch's runtime frees the gradients at the start of every step (torchtitan train.py
        @ 9dec370 and the included trainer call ``optimizer.zero_grad()``, whose default
        ``set_to_none=True`` drops every ``.grad``, torch/optim/optimizer.py), and autograd or
        FSDP2's reduce-scatter allocates them again in the backward: held from the rank's first
        backward span of the step (an upper bound: layers whose gradients are not made yet count)
        to the start of the next step. Megatron's and DeepSpeed's gradient buffers are
        persistent: no events."""
        if self.plan.framework != Runtime.TORCH:
            return {}
        import pandas as pd

        df = tl.spans
        kinds = df["kind"].astype(str).to_numpy()
        frame = pd.DataFrame({"rank": df["rank"].to_numpy(np.int64), "step": df["step"].to_numpy(np.int64),
                              "start": df["start_s"].to_numpy(float),
                              "bwd": np.where(np.isin(kinds, [*BACKWARD_KINDS, Kind.BWD_WEIGHT]),
                                              df["start_s"].to_numpy(float), np.nan)})
        firsts = frame.groupby(["rank", "step"], sort=True).agg(start=("start", "min"), bwd=("bwd", "min"))
        out = {}
        for rank, part in firsts.groupby(level="rank"):
            starts, bwd = part["start"].to_numpy(float), part["bwd"].to_numpy(float)
            t = np.concatenate([bwd, starts[1:]])
            d = np.concatenate([np.ones(bwd.size), -np.ones(starts.size - 1)])
            d[: bwd.size][np.isnan(bwd)] = 0.0
            d[bwd.size:][np.isnan(bwd[:-1])] = 0.0
            keep = ~np.isnan(t)
            order = np.argsort(t[keep], kind="stable")
            out[int(rank)] = (t[keep][order], d[keep][order])
        return out

    @staticmethod
    def _offload_events(tl: Timeline, sizes: dict[int, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Activation offload: a micro-batch's activations leave HBM when their copy to the host
        ends and come back when the copy back starts; (rank, time_s, bytes) of each such event."""
        copies = tl.labels("lane").equal(Lane.MEMCPY)
        if copies.any():
            names = tl.labels("name")  # thousands of distinct names: compared by code
            out = np.flatnonzero(copies & names.equal(ACT_TO_HOST))
            back = np.flatnonzero(copies & names.equal(ACT_TO_DEVICE))
        else:  # (the names are made only when read)
            out = back = np.zeros(0, np.int64)
        rank, stage = tl.column("rank").astype(np.int64, copy=False), tl.column("stage").astype(np.int64, copy=False)
        return (np.concatenate([rank[out], rank[back]]),
                np.concatenate([_floats(tl, "end_s")[out], _floats(tl, "start_s")[back]]),
                np.concatenate([-_lookup(sizes, stage[out]), _lookup(sizes, stage[back])]))

    def offloaded_activation_peak(self, tl: Timeline, span_s: float | None = None) -> dict[int, float]:
        """Per rank, the most activation bytes held on the host at once (activation offload):
        the blocks' checkpoints of the micro-batches in flight when each layer's goes to the host
        at once, else the micro-batches' activations between their copies out and back."""
        if self.layers_on_host:
            on_host = {st.index: stage_layer_activation_bytes(self.model, self.plan, st) for st in self.stages}
            return {r: curve.peak for r, curve in self.activation_curves(tl, on_host, span_s).items()}
        sizes = {st.index: self.stage_activation_bytes(st) for st in self.stages}
        rank, t, d = self._offload_events(tl, sizes)
        if not rank.size:
            return {}
        # one instant, as in activation_curves: a copy back that starts as another copy out ends
        # nets with it, whichever way the round-off of their times falls
        t = intervals.snap(t, _instant(tl, span_s))
        order = np.lexsort((t, rank))  # stable: each instant's events in their order
        rank, t, d = rank[order], t[order], -d[order]
        new = np.ones(t.size, bool)
        new[1:] = (rank[1:] != rank[:-1]) | (t[1:] != t[:-1])
        first = np.flatnonzero(new)  # one sum per (rank, instant), as a grouped sum adds them
        level, rank = group_sums(d, first), rank[first]
        bounds = run_starts(rank).tolist()
        return {int(rank[a]): float(np.cumsum(level[a:b]).max(initial=0.0))
                for a, b in zip(bounds, [*bounds[1:], rank.size], strict=True)}


@dataclass(frozen=True)
class _Units:
    """Values per (rank, step, stage, micro-batch) unit, units sorted by ``key``."""

    key: np.ndarray
    rank: np.ndarray
    stage: np.ndarray
    value: np.ndarray

    def at(self, keys: np.ndarray) -> np.ndarray:
        """The value of each of ``keys`` (NaN where a unit has none)."""
        if not self.key.size:
            return np.full(keys.size, np.nan)
        i = np.minimum(np.searchsorted(self.key, keys), self.key.size - 1)
        return np.where(self.key[i] == keys, self.value[i], np.nan)


@dataclass(frozen=True)
class _UnitKeys:
    """Spans' units as int64s ordered as (rank, step, stage, micro-batch); -1 for spans without a
    stage or micro-batch. ``order``: the stable argsort of ``key``, made once for every
    :meth:`reduce` (a subset of rows in that order is the subset's own stable sort)."""

    key: np.ndarray
    rank: np.ndarray
    stage: np.ndarray
    order: np.ndarray

    def reduce(self, rows: np.ndarray, values: np.ndarray, reduce: np.ufunc) -> _Units:
        """``reduce`` (np.fmin, np.fmax: NaN skipped) of ``values`` over each unit's ``rows``."""
        order = self.order[(rows & (self.key >= 0))[self.order]]
        key = self.key[order]
        first = run_starts(key)
        if not first.size:
            empty = np.zeros(0, np.int64)
            return _Units(empty, empty, empty, np.zeros(0))
        picked = order[first]
        return _Units(key[first], self.rank[picked], self.stage[picked], reduce.reduceat(values[order], first))


def _unit_keys(tl: Timeline, rows: np.ndarray) -> _UnitKeys:
    """The unit of each of the spans ``rows`` of ``tl`` (see :class:`_UnitKeys`): the labels'
    mixed-radix number, each label counted from its smallest value (``np.ravel_multi_index``'s
    row-major index, without its bounds checks)."""
    labels = [tl.column(k).astype(np.int64, copy=False)[rows] for k in ("rank", "step", "stage", "microbatch")]
    labelled = (labels[2] >= 0) & (labels[3] >= 0)
    every = bool(labelled.all())
    picked = labels if every else [x[labelled] for x in labels]
    index = mixed_radix(picked)
    if every:
        key = index
    else:
        key = np.full(rows.size, -1, np.int64)
        key[labelled] = index
    return _UnitKeys(key, labels[0], labels[2], np.argsort(key, kind="stable"))


def mixed_radix(labels: list[np.ndarray]) -> np.ndarray:
    """One int64 per row of the integer ``labels`` columns, ordered as the rows' label tuples:
    each label counted from its smallest value, in a radix of its range (what
    ``np.ravel_multi_index`` gives for those offsets and ranges, without its bounds checks)."""
    index = np.zeros(labels[0].size, np.int64)
    if not index.size:
        return index
    for x in labels:
        lo = int(x.min())
        index *= int(x.max()) - lo + 1
        index += x - lo
    return index


def _lookup(table: dict[int, float], keys: np.ndarray) -> np.ndarray:
    """``table[k]`` for each of ``keys`` (NaN for a key it lacks)."""
    if not keys.size:
        return np.zeros(0)
    lo, hi = int(keys.min()), int(keys.max())
    values = np.full(hi - lo + 1, np.nan)
    for k, v in table.items():
        if lo <= k <= hi:
            values[k - lo] = v
    return values[keys - lo]


def _floats(tl: Timeline, name: str) -> np.ndarray:
    """A column of ``tl`` as float64."""
    return tl.column(name).astype(float, copy=False)


def _instant(tl: Timeline, span_s: float | None) -> float:
    """Seconds within which events are one instant: :data:`INSTANT_TOLERANCE` of ``span_s``
    (None: the Timeline's span)."""
    return INSTANT_TOLERANCE * (tl.span_s if span_s is None else span_s)
