"""Steady state of a step in two phases: every forward, then every backward (GPipe).

No one period shows in such a step: its forwards repeat every P_f seconds, its backwards every
P_b (llama3-8b on pp 4: 31.5 and 48.9 ms), so :func:`sim.steady_state.find_extension` finds none.
Each phase is periodic on its own, though; a step of m micro-batches is the shorter step of m' with C = m - m' more
micro-batches inserted in both phases at the same window w:

- forward-phase tasks of micro-batches below w as they ran, copy j of the window's forwards
  j * P_f later, the forwards after the window C * P_f later;
- every backward-phase task C * P_f later again (the phase starts when the forwards end), copy j
  of the window's backwards a further j * P_b, the backwards after the window a further C * P_b;
- tasks of no micro-batch: unmoved before the forward window, C * P_f later between the windows,
  C * (P_f + P_b) after the backward window (none may run inside a window).

The backward phase may begin on one rank while the forwards end on another (receives are posted
early); what must hold is that no backward-phase task starts before a forward it does not move
with has ended (:func:`_apart`).

Nothing is assumed: both periods are verified on the shorter step as :mod:`sim.steady_state`
verifies one (a run of at least max(1, pp) micro-batches each, the window common to both). ``tests/sim/test_steady_state.py`` checks the result against
``--exact``.
"""

from __future__ import annotations

import re

import numpy as np

from core.task_columns import KIND_CODES
from core.taskgraph import TaskGraph
from core.vocab import Kind, Phase
from sim.steady_state import (
    SHIFT_TOLERANCE,
    Extension,
    PerGroup,
    Replication,
    microbatch_labels,
    signatures,
    steady_runs,
    tasks_by_microbatch,
)

_ACTION = re.compile(r"\b([FBW])\d")  # an action label: F3, B3c1, W3


def backward_phase(graph: TaskGraph) -> np.ndarray:
    """Per task: does it belong to a micro-batch's backward phase? Forward compute, the transfers
    labelled with a forward (``act F3``, ``recv F3``) and a micro-batch's unlabelled tasks that a
    forward-phase task waits for (ZeRO-3's per-layer gathers, ``L0.param_ag``, issued for the
    forward) do not; everything else does (the backward's own gathers, reduce-scatters)."""
    c = graph.columns
    found = [_ACTION.search(name) for name in c.names]  # once per distinct name
    forward_label = np.array([label is not None and label.group(1) == Phase.F for label in found], bool)[c.name]
    labelled = np.array([label is not None for label in found], bool)[c.name]
    forward = (c.kind == KIND_CODES[Kind.FWD]) | forward_label
    unlabelled = (~labelled & (c.microbatch >= 0)).tolist()
    frontier: list[int] = np.flatnonzero(forward).tolist()
    while frontier:  # up the dependencies from every forward-phase task, through unlabelled tasks
        task = frontier.pop()
        for dep in graph.deps[task]:
            if unlabelled[dep] and not forward[dep]:
                forward[dep] = True
                frontier.append(dep)
    return ~forward


def find_phased_extension(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int, full: int,
                          pp: int) -> tuple[Extension, Replication] | None:
    """The two-phase extension of a shorter step (see the module doc), or None."""
    mb = microbatch_labels(graph)
    back = backward_phase(graph)
    own = mb >= 0
    if not (own & back).any() or not (own & ~back).any():
        return None
    by_mb = tasks_by_microbatch(graph, simulated)
    signature = signatures(graph)
    tol = SHIFT_TOLERANCE * float(np.nanmax(end) - np.nanmin(start))
    forward = steady_runs([ids[~back[ids]] for ids in by_mb], signature, start, end, 1, tol)
    backward = steady_runs([ids[back[ids]] for ids in by_mb], signature, start, end, 1, tol)
    if forward is None or backward is None:
        return None
    (f0, f1, p_f), (b0, b1, p_b) = forward, backward
    window = max(f0, b0)
    if min(f1, b1) - window < max(1, pp) or p_f <= 0 or p_b <= 0 or not _apart(mb, back, start, end, window, tol):
        return None
    copies = full - simulated
    shift = _shifts(mb, back, start, end, window, copies, p_f, p_b)
    if shift is None:
        return None
    ext = Extension(simulated_microbatches=simulated, microbatches=full, period_microbatches=1,
                    period_s=p_f + p_b, window_start=window)
    return ext, _replication(mb, back, shift, window, copies, p_f, p_b)


def _apart(mb: np.ndarray, back: np.ndarray, start: np.ndarray, end: np.ndarray, window: int, tol: float) -> bool:
    """Do the phases keep apart where they move differently: every backward-phase task starts
    after the forwards of the window and before it have ended (those do not move with it), and
    the backwards after the window start after every forward has ended (they move further)?"""
    fwd = (mb >= 0) & ~back
    bwd = (mb >= 0) & back
    return (float(start[bwd].min()) > float(end[fwd & (mb <= window)].max()) + tol
            and float(start[bwd & (mb > window)].min()) > float(end[fwd].max()) + tol)


def _shifts(mb: np.ndarray, back: np.ndarray, start: np.ndarray, end: np.ndarray, window: int, copies: int,
            p_f: float, p_b: float) -> np.ndarray | None:
    """Seconds each simulated task moves in the full step (None if a task of no micro-batch runs
    inside either window)."""
    in_window = mb == window
    f_lo, f_hi = float(start[in_window & ~back].min()), float(end[in_window & ~back].max())
    b_lo, b_hi = float(start[in_window & back].min()), float(end[in_window & back].max())
    loose = mb < 0
    if ((loose & (end > f_lo) & (start < f_hi)) | (loose & (end > b_lo) & (start < b_hi))).any():
        return None
    after = mb > window
    shift = np.where(back, copies * p_f + np.where(after, copies * p_b, 0.0), np.where(after, copies * p_f, 0.0))
    loose_shift = np.where(start >= b_hi, copies * (p_f + p_b), np.where(start >= f_hi, copies * p_f, 0.0))
    return np.where(loose, loose_shift, shift)


def _replication(mb: np.ndarray, back: np.ndarray, shift: np.ndarray, window: int, copies: int, p_f: float,
                 p_b: float) -> Replication:
    """Every simulated task once, moved by ``shift``, then the window's ``copies`` copies."""
    win = np.flatnonzero(mb == window)
    j = np.repeat(np.arange(1, copies + 1), win.size)
    tiled = np.tile(win, copies)
    copy_shift = np.where(back[tiled], copies * p_f + j * p_b, j * p_f)
    task = np.concatenate([np.arange(mb.size), tiled])
    mb_shift = np.concatenate([np.where(mb > window, copies, 0), j])
    return Replication(task=task, shift_s=np.concatenate([shift, copy_shift]), microbatch_shift=mb_shift)


def phased_extension(microbatches: int, pp: int) -> PerGroup:
    """:func:`sim.steady_state.steady_run`'s ``by_phase`` for a step of ``microbatches`` on ``pp`` stages."""

    def extend(graph: TaskGraph, start: np.ndarray, end: np.ndarray, simulated: int,
               payload: object) -> tuple[Extension, Replication] | None:
        return find_phased_extension(graph, start, end, simulated, microbatches, pp)

    return extend
