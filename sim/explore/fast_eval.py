"""Evaluate one plan fast: its step time and where the time goes, as the engine would report them.

The plan's folded step is emitted as a compact task list (:mod:`sim.explore.step_graph`), priced
by the simulator's TaskCoster (:mod:`sim.explore.pricing`) and timed in one pass
(:mod:`sim.explore.walk`). The Timeline metrics of :mod:`sim.metrics` then follow from task
intervals instead of spans:

- a compute task's ops are laid back to back, so its rank's compute stream is busy for exactly the
  task's duration, and the stream's busy time is the sum of its tasks' durations (bubble);
- communication exposed on a rank = the time inside its compute tasks with no compute kernel
  running (tensor/context-parallel collectives) + the time its DP and pipeline transfers (sends,
  and their mirrored receives) run outside its compute tasks.

These equal the engine's metrics whenever no two transfers of different streams share a node's
network at the same time; when they do (``contention``), the engine slows both and its step is
longer (durations only grow, so this is a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedules.actions import PipelineSchedule
from schedules.plan import ParallelPlan
from sim import intervals
from sim.explore.pricing import PlanPrices
from sim.explore.step_graph import COMPUTE, DP, SEND, StepGraph, emit_step
from sim.explore.walk import time_step


@dataclass(frozen=True, kw_only=True)
class FastStep:
    """One plan's step, as the contention-free pass times it (fractions of the step time).

    ``compute_fraction + layer_comm_fraction + transfer_comm_fraction + idle_fraction == 1``,
    averaged over pipeline ranks; ``exposed_comm_fraction`` is layer + transfer (the metric of
    :mod:`sim.metrics`) and ``bubble_fraction`` the share of the step each compute stream is idle.
    """

    step_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    compute_fraction: float
    layer_comm_fraction: float
    transfer_comm_fraction: float
    idle_fraction: float
    contention: bool


@dataclass(frozen=True)
class TaskArrays:
    """A timed StepGraph as numpy arrays (one entry per task)."""

    pp: int
    lane: np.ndarray
    rank_pp: np.ndarray
    peer_pp: np.ndarray
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    kernel: np.ndarray
    crosses: np.ndarray


def evaluate_plan(plan: ParallelPlan, schedule: PipelineSchedule, prices: PlanPrices, gpus_per_node: int) -> FastStep:
    """The step of ``plan`` run with ``schedule``, priced by ``prices``."""
    g = emit_step(plan, schedule, prices)
    start, end = time_step(g)
    return step_of(arrays(g, start, end), gpus_per_node)


def arrays(g: StepGraph, start: list[float], end: list[float]) -> TaskArrays:
    """Columns of a timed StepGraph."""
    lanes, prices, peers = zip(*g.prices, strict=True)
    pid = np.asarray(g.price_of, np.int64)
    rank_pp = np.empty(pid.size, np.int64)
    for r, ids in enumerate(g.order):
        rank_pp[ids] = r
    peer_pp = np.asarray(peers, np.int64)[pid]
    return TaskArrays(
        pp=g.pp, lane=np.asarray(lanes, np.int8)[pid], rank_pp=rank_pp, peer_pp=peer_pp,
        rank=np.asarray(g.ranks, np.int64)[rank_pp], start=np.asarray(start, float), end=np.asarray(end, float),
        dur=np.asarray([p.duration_s for p in prices], float)[pid],
        kernel=np.asarray([p.kernel_s for p in prices], float)[pid],
        crosses=np.asarray([p.crosses_nodes for p in prices], bool)[pid])


def step_of(t: TaskArrays, gpus_per_node: int) -> FastStep:
    """Step time and the Timeline metrics of timed tasks."""
    live = t.dur > 0
    lo, hi = float(t.start[live].min()), float(t.end[live].max())
    step = hi - lo
    comp = (t.lane == COMPUTE) & live
    busy = np.bincount(t.rank_pp[comp], weights=t.dur[comp], minlength=t.pp)
    kernel = np.bincount(t.rank_pp[comp], weights=t.kernel[comp], minlength=t.pp)
    transfer = _transfers_outside_compute(t, live, comp, stride=2 * hi + 1)
    layer = busy - kernel
    return FastStep(
        step_time_s=step,
        bubble_fraction=float(np.mean((step - busy) / step)),
        exposed_comm_fraction=float(np.mean((layer + transfer) / step)),
        compute_fraction=float(np.mean(kernel / step)),
        layer_comm_fraction=float(np.mean(layer / step)),
        transfer_comm_fraction=float(np.mean(transfer / step)),
        idle_fraction=float(np.mean((step - kernel - layer - transfer) / step)),
        contention=_contention(t, live, gpus_per_node, hi),
    )


def _transfers_outside_compute(t: TaskArrays, live: np.ndarray, comp: np.ndarray, stride: float) -> np.ndarray:
    """Per pipeline rank, seconds its DP/pipeline transfers run while its compute stream is idle.

    Ranks are laid side by side on one time axis (rank r shifted by r * stride) so one interval
    subtraction serves them all.
    """
    comm = ((t.lane == SEND) | (t.lane == DP)) & live
    recv = comm & (t.peer_pp >= 0)
    ranks = np.concatenate([t.rank_pp[comm], t.peer_pp[recv]])
    s = np.concatenate([t.start[comm], t.start[recv]]) + ranks * stride
    e = np.concatenate([t.end[comm], t.end[recv]]) + ranks * stride
    shift = t.rank_pp[comp] * stride
    out_s, out_e = intervals.subtract((s, e), (t.start[comp] + shift, t.end[comp] + shift))
    owner = np.floor(out_s / stride).astype(np.int64)
    return np.bincount(owner, weights=out_e - out_s, minlength=t.pp)[: t.pp]


def _contention(t: TaskArrays, live: np.ndarray, gpus_per_node: int, hi: float) -> bool:
    """Do a pipeline send and a DP transfer ever use one node's network at the same time?"""
    fabric = live & t.crosses
    send, dp = fabric & (t.lane == SEND), fabric & (t.lane == DP)
    if not send.any() or not dp.any():
        return False
    stride = 2 * hi + 1
    node = t.rank // gpus_per_node
    a = (t.start[send] + node[send] * stride, t.end[send] + node[send] * stride)
    b = (t.start[dp] + node[dp] * stride, t.end[dp] + node[dp] * stride)
    return intervals.intersection_length(a, b) > 1e-9 * hi
