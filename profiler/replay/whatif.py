"""Apply what-if knobs to a replay model: new durations, host delays and rendezvous.

Every knob only lowers or raises fixed durations (or removes a rendezvous), and an item starts
at the max of its predecessors' ends plus fixed delays, so the replay is monotone: shorter work
never makes the step longer.

Straggler removal (``--remove-straggler R``): rank R's compute and host time are each scaled
to the median of its peers (the other ranks of its pipeline stage when the run has several,
else all other ranks), never up. ``auto`` picks the rank whose compute + host time exceeds
its peers' median the most.
"""

from __future__ import annotations

import numpy as np

from core.vocab import Lane
from profiler.replay.graph import Params
from profiler.replay.knobs import LinkKnob, Selector, WhatIf
from profiler.replay.model import ReplayModel
from profiler.replay.simulate import base_params


def apply_whatif(model: ReplayModel, whatif: WhatIf) -> tuple[Params, list[str]]:
    """The parameters of ``model`` under ``whatif``, and notes on what the knobs did."""
    p = base_params(model)
    sel = Selector(model.items, model.world_size)
    notes: list[str] = []
    ranks = set(int(r) for r in model.items["rank"].unique())
    for target, factor in whatif.scale:
        _scale(model, p, sel, target, factor, ranks)
    for knob in whatif.link:
        _link(model, p, sel, knob, whatif.gpus_per_node)
    for target in whatif.drop:
        _scale(model, p, sel, target, 0.0, ranks)
        if Lane.COMM in target or target in ("tp", "pp", "dp", "cp"):
            p.barrier[sel.mask(target)] = ""
    if whatif.remove_straggler is not None:
        notes.append(_remove_straggler(model, p, sel, whatif.remove_straggler, ranks))
    return p, notes


def _check_rank(target: str, ranks: set[int]) -> None:
    if target.startswith("rank"):
        r = int(target[4:].split(".", 1)[0])
        if r not in ranks:
            raise ValueError(f"{target}: rank {r} is not in the trace (ranks: {', '.join(map(str, sorted(ranks)))})")


def _scale(model: ReplayModel, p: Params, sel: Selector, target: str, factor: float, ranks: set[int]) -> None:
    _check_rank(target, ranks)
    mask = sel.mask(target)
    base = target.split(".")[-1]
    if not mask.any() and base not in ("host", "waiting"):
        raise ValueError(f"{target}: selects no work in this run")
    p.dur_s[mask] *= factor
    p.pre_s[mask] *= factor
    if base in ("host", "waiting"):
        rank_sel = np.ones(len(model), bool)
        if target.startswith("rank"):
            rank_sel = model.items["rank"].to_numpy() == int(target[4:].split(".", 1)[0])
        delays = p.host_s if base == "host" else p.lag_s
        delays[rank_sel] *= factor


def fit_latency(model: ReplayModel, mask: np.ndarray, sel: Selector) -> np.ndarray:
    """Per item: the latency (alpha) part of its transfer, fitted per (dim, kind) as the
    intercept of the last arrival's transfer time over message size (0 when not fittable)."""
    alpha = np.zeros(len(model))
    items = model.items
    idx = np.flatnonzero(mask)
    for _, part in items.iloc[idx].groupby([sel.dims[idx], items["kind"].to_numpy()[idx]]):
        ids = part.index.to_numpy()
        sizes, times = part["bytes"].to_numpy(float), model.dur_s[ids]
        if np.unique(sizes).size >= 2:
            slope, intercept = np.polyfit(sizes, times, 1)
            if slope > 0:
                alpha[ids] = float(np.clip(intercept, 0.0, times.min()))
    return alpha


def _link(model: ReplayModel, p: Params, sel: Selector, knob: LinkKnob, gpus_per_node: int) -> None:
    target, param, factor = knob.target, knob.param, knob.factor
    timeline = model.measured.get("timeline")
    one_host = timeline is None or "gpu" not in str(timeline.meta.device_kind or "")
    mask = sel.link_mask(target, gpus_per_node, one_host)
    if not mask.any():
        raise ValueError(f"--link {target}: selects no transfers in this run")
    alpha = np.minimum(fit_latency(model, mask, sel), p.dur_s)
    beta = p.dur_s - alpha
    if param == "bandwidth":
        p.dur_s[mask] = alpha[mask] + beta[mask] / factor
    else:
        p.dur_s[mask] = alpha[mask] * factor + beta[mask]
        p.post_s[mask] += knob.add_s


def _peers(model: ReplayModel, rank: int, ranks: set[int]) -> list[int]:
    stage = model.measured["timeline"].meta.rank_pp if model.measured else {}
    same = [r for r in ranks if r != rank and stage.get(r, r) == stage.get(rank, rank)]
    return same or [r for r in ranks if r != rank]


def _totals(model: ReplayModel, p: Params, sel: Selector) -> tuple[dict[int, float], dict[int, float]]:
    rank = model.items["rank"].to_numpy()
    compute, host = sel.mask("compute"), sel.mask("host")
    c = {int(r): float(p.dur_s[compute & (rank == r)].sum()) for r in np.unique(rank)}
    h = {int(r): float(p.dur_s[host & (rank == r)].sum() + p.host_s[rank == r].sum()) for r in np.unique(rank)}
    return c, h


def _remove_straggler(model: ReplayModel, p: Params, sel: Selector, which: str, ranks: set[int]) -> str:
    if len(ranks) < 2:
        raise ValueError("--remove-straggler needs a run with at least 2 ranks")
    compute, host = _totals(model, p, sel)
    if which == "auto":
        excess = {r: (compute[r] + host[r]) / max(1e-12, float(np.median([compute[q] + host[q] for q in _peers(model, r, ranks)])))
                  for r in ranks}
        rank = max(sorted(excess), key=lambda r: excess[r])
    else:
        rank = int(which)
        _check_rank(f"rank{rank}", ranks)
    peers = _peers(model, rank, ranks)
    for totals, target in ((compute, f"rank{rank}.compute"), (host, f"rank{rank}.host")):
        ratio = float(np.median([totals[q] for q in peers])) / totals[rank] if totals[rank] > 0 else 1.0
        if ratio < 1.0:
            _scale(model, p, sel, target, ratio, ranks)
    return (f"--remove-straggler: rank {rank}'s compute and host time brought to the median of ranks "
            f"{', '.join(map(str, sorted(peers)))}")
