"""Coalesce Timeline spans into display bars: what a screen can show, not every span.

- Zero-length spans (a send that costs nothing) are not drawn: they would add empty rows.
- The compute spans of one pipeline action (same rank, kind, stage, chunk, micro-batch) merge into
  one bar, across the in-layer collectives that split them; compute spans of no micro-batch (the
  step's gradient norm, its optimizer update) merge only as communication spans do, below the
  merge gap, so a wait between them (the norm's all-reduce) stays visible.
- Communication spans of one rank, lane and kind merge when the gap between them is below
  1/``SCREEN_PX`` of the step (under a pixel at full width), whatever their micro-batch. Such a bar records how many spans it holds
  and their busy share (busy seconds / bar length), so it can be drawn translucent where the lane
  is mostly idle. A 70B step's ~40k tensor-parallel collectives become ~2k bars this way.
- A figure draws at most about ``BAR_BUDGET`` bars (each costs ~25 bytes of HTML): where the
  timeline would draw more, the merge gap doubles (1/1000, 1/500, 1/250 of the step) until it
  fits. Llama 3 405B at PP 16 (19k bars at 1/2000) draws 8.9k at 1/500; the figure says which.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.vocab import Kind, Phase
from schedules.actions import Action
from sim.timeline import COMPUTE_LANE, Timeline

KEY = ["rank", "lane", "kind", "step", "stage", "chunk", "microbatch"]
COMM_KEY = ["rank", "lane", "kind", "step"]
SCREEN_PX = 2000
COARSEST_PX = 250  # the widest merge gap the bar budget may reach: 1/250 of the step
BAR_BUDGET = 10_000  # bars a figure draws at most, short of COARSEST_PX (~250 kB of HTML)
PHASE_LETTER: dict[str, str] = {Kind.FWD: Phase.F, Kind.BWD: Phase.B, Kind.BWD_INPUT: Phase.B, Kind.BWD_WEIGHT: Phase.W}


@dataclass(frozen=True)
class DisplayBars:
    """Bars to draw (columns of KEY plus name, start_s, end_s, spans, busy_s, label); ``busy_s`` is
    the length of the union of the bar's spans.

    Attributes:
        dropped_ranks: ranks left out to stay under the bar budget (the first ranks are kept).
        merged_spans: communication spans drawn inside a bar that holds several of them.
        resolution_s: the gap (s) below which communication spans of one action merge.
        screen_px: the step divided by ``resolution_s`` (2000, or fewer where the budget needed it).
    """

    bars: pd.DataFrame
    dropped_ranks: int
    merged_spans: int
    resolution_s: float
    screen_px: int = SCREEN_PX


def display_bars(tl: Timeline, max_bars: int = 60_000, screen_px: int = SCREEN_PX,
                 budget: int = BAR_BUDGET) -> DisplayBars:
    """The bars of ``tl`` (see the module docstring): merged at 1/``screen_px`` of the step, or
    coarser (halving ``screen_px`` down to COARSEST_PX) while there are more than ``budget``."""
    df = tl.spans[tl.spans["end_s"] > tl.spans["start_s"]]
    if df.empty:
        return DisplayBars(df.assign(spans=[], busy_s=[], label=[]), 0, 0, 0.0)
    step = float(df["end_s"].max() - df["start_s"].min())
    bars = _merge(df, step / screen_px)
    while len(bars) > budget and screen_px // 2 >= COARSEST_PX:
        screen_px //= 2
        bars = _merge(df, step / screen_px)
    resolution = step / screen_px
    merged = int(bars.loc[bars["lane"] != COMPUTE_LANE, "spans"].where(lambda s: s > 1, 0).sum())
    bars, dropped = _budget(bars, max_bars)
    with_chunk = bool((df["chunk"] > 0).any())
    bars["label"] = [action_label(k, mb, c, with_chunk)
                     for k, mb, c in zip(bars["kind"], bars["microbatch"], bars["chunk"], strict=True)]
    return DisplayBars(bars, dropped, merged, resolution, screen_px)


def _merge(df: pd.DataFrame, resolution: float) -> pd.DataFrame:
    """Group consecutive spans into bars (compute: by action; communication: by kind and gap)."""
    compute = (df["lane"].astype(str) == COMPUTE_LANE).to_numpy()
    kind_order = np.where(compute, -1, pd.factorize(df["kind"])[0])
    df = df.assign(_kind_order=kind_order).sort_values(["rank", "lane", "_kind_order", "start_s"], kind="stable")
    compute = (df["lane"].astype(str) == COMPUTE_LANE).to_numpy()
    same_action, same_lane = (_same_as_previous(df, key) for key in (KEY, COMM_KEY))
    starts, ends = df["start_s"].to_numpy(), df["end_s"].to_numpy()
    reach = _running_end(ends, same_lane)
    new = np.ones(len(df), dtype=bool)
    apart = starts[1:] > reach[:-1] + resolution
    loose = df["microbatch"].to_numpy()[1:] < 0  # step work (norm, optimizer): no action holds it together
    new[1:] = np.where(compute[1:], ~same_action | (loose & apart), ~same_lane | apart)
    before = np.where(new, -np.inf, np.concatenate([[-np.inf], reach[:-1]]))  # covered so far in the bar
    covered = np.clip(ends - np.maximum(starts, before), 0.0, None)  # overlapping spans count once
    bars = df.assign(_g=np.cumsum(new), _len=covered).groupby("_g", sort=False).agg(
        rank=("rank", "first"), lane=("lane", "first"), kind=("kind", "first"), name=("name", "first"),
        step=("step", "first"), stage=("stage", "first"), chunk=("chunk", "first"),
        microbatch=("microbatch", "first"), start_s=("start_s", "min"), end_s=("end_s", "max"),
        spans=("name", "size"), busy_s=("_len", "sum"), _mbs=("microbatch", "nunique"),
    ).reset_index(drop=True)
    bars.loc[bars["_mbs"] > 1, "microbatch"] = -1  # a bar over several micro-batches names none
    bars = bars.drop(columns="_mbs")
    bars["lane"] = bars["lane"].astype(str)
    bars["kind"] = bars["kind"].astype(str)
    return bars


def _same_as_previous(df: pd.DataFrame, key: list[str]) -> np.ndarray:
    """Per row but the first: whether it has the previous row's values in every column of ``key``."""
    codes = [pd.factorize(df[c])[0] for c in key]
    return np.logical_and.reduce([c[1:] == c[:-1] for c in codes])


def _running_end(ends: np.ndarray, same_key: np.ndarray) -> np.ndarray:
    """Per row, the latest end so far within its run of equal keys (spans may nest)."""
    run = np.cumsum(np.concatenate([[True], ~same_key]))
    out = pd.Series(ends).groupby(run).cummax().to_numpy()
    return np.asarray(out, dtype=np.float64)


def _budget(bars: pd.DataFrame, max_bars: int) -> tuple[pd.DataFrame, int]:
    """Keep whole ranks, first ones first, while the bar count stays under ``max_bars``."""
    if len(bars) <= max_bars:
        return bars, 0
    counts = bars.groupby("rank").size().cumsum()
    keep = counts[counts <= max_bars].index
    keep = keep if len(keep) else counts.index[:1]
    return bars[bars["rank"].isin(keep)].copy(), bars["rank"].nunique() - len(keep)


def action_label(kind: str, microbatch: int, chunk: int, with_chunk: bool) -> str:
    """Text inside a pipeline action's bar, as the schedule's orders print it: F3, B3, W3, or
    F3c1 when ranks hold several chunks; empty for work that is not a pipeline action."""
    phase = PHASE_LETTER.get(kind)
    if phase is None or microbatch < 0:
        return ""
    return Action(stage=0, phase=phase, microbatch=int(microbatch), chunk=int(chunk)).label(with_chunk)
