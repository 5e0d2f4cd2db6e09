"""Coalesce Timeline spans into display bars (one bar per pipeline action on the compute lane)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.timeline import Timeline

KEY = ["rank", "lane", "kind", "step", "stage", "chunk", "microbatch"]


def display_bars(tl: Timeline, max_bars: int = 60_000) -> tuple[pd.DataFrame, int]:
    """Contiguous spans with the same labels merged into bars; also returns ranks dropped to stay
    under ``max_bars`` (the first ranks are kept)."""
    df = tl.spans.sort_values(["rank", "lane", "start_s"], kind="stable")
    if df.empty:
        return df.assign(label=[]), 0
    codes = [pd.factorize(df[c])[0] for c in KEY]
    starts, ends = df["start_s"].to_numpy(), df["end_s"].to_numpy()
    new = np.ones(len(df), dtype=bool)
    same_key = np.logical_and.reduce([c[1:] == c[:-1] for c in codes])
    # Compute spans of one action merge even across the in-layer collectives that split them;
    # communication spans merge only when they touch, so each collective stays visible.
    compute = (df["lane"].astype(str) == "compute").to_numpy()
    new[1:] = ~same_key | (~compute[1:] & (starts[1:] > ends[:-1] + 1e-12))
    group = np.cumsum(new)
    bars = df.assign(_g=group).groupby("_g", sort=False).agg(
        rank=("rank", "first"), lane=("lane", "first"), kind=("kind", "first"), name=("name", "first"),
        step=("step", "first"), stage=("stage", "first"), chunk=("chunk", "first"),
        microbatch=("microbatch", "first"), start_s=("start_s", "min"), end_s=("end_s", "max"),
        spans=("name", "size"),
    ).reset_index(drop=True)
    dropped = 0
    if len(bars) > max_bars:
        counts = bars.groupby("rank").size().cumsum()
        keep = counts[counts <= max_bars].index
        keep = keep if len(keep) else counts.index[:1]
        dropped = bars["rank"].nunique() - len(keep)
        bars = bars[bars["rank"].isin(keep)]
    bars["lane"] = bars["lane"].astype(str)
    bars["kind"] = bars["kind"].astype(str)
    bars["label"] = [_label(k, mb, c) for k, mb, c in zip(bars["kind"], bars["microbatch"], bars["chunk"], strict=True)]
    return bars, dropped


def _label(kind: str, microbatch: int, chunk: int) -> str:
    """Short text inside a bar: F3 / B3 / W3 (+c1 for chunk 1)."""
    letter = {"fwd": "F", "bwd": "B", "bwd_input": "B", "bwd_weight": "W"}.get(kind)
    if letter is None or microbatch < 0:
        return ""
    return f"{letter}{microbatch}" + (f"c{chunk}" if chunk > 0 else "")
