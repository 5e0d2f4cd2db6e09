"""Which process group each gloo collective ran on, found by matching ranks against each other.

gloo traces (torch 2.13) do not name the process group of a collective: the group name is a
string argument, which the profiler does not record. Two facts recover it:

1. A synchronous collective runs at the same time on every member of its group: for a span on
   rank r, the right group G is the one whose other members each have a span of the same
   collective (same kind and size; a recv for a send) overlapping it, ending closest in time.
2. A process group's gloo work runs on that group's own worker threads: every span on one
   worker thread belongs to one group. A majority vote per thread removes timing noise (a DP
   replica's TP collective of the same size can overlap by chance; it cannot win a thread).

Candidate groups come from ``distributedInfo.pg_config`` (``pg_desc`` "mesh_tp" -> tp, ...).
Within each group, collectives are numbered in issue order on every member, giving the key
"<pg name>#<seq>" that matches the same collective across ranks (used by replay).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd

from core.vocab import Collective
from profiler.kineto.groups import GENERIC_LANE, GroupMap, dim_lane, group_map_from_manifest
from profiler.kineto.parsed import ParsedRun
from sim.timeline import Timeline

_MESH_DESC = re.compile(r"mesh_(\w+)")
_FAMILY = {"send": "p2p", "recv": "p2p"}
P2P_DIMS = ("pp", "cp")
A2A_DIMS = ("ep",)  # the trainer's all-to-alls are MoE token exchanges


def infer_gloo_groups(run: ParsedRun) -> ParsedRun:
    """A copy of ``run`` whose gloo communication spans carry their group, lane and group key."""
    spans, raw = run.timeline.spans, run.raw
    work = np.flatnonzero((raw["source"] == "gloo_work").to_numpy() & (spans["lane"].astype(str) == GENERIC_LANE).to_numpy())
    candidates = _candidate_groups(run.process_groups, group_map_from_manifest(run.manifest or {}))
    if work.size == 0 or not candidates:
        return run
    table = _work_table(spans, raw, work)
    table["pg"] = [_best_group(row, table, candidates) for row in table.itertuples()]
    table["pg"] = _vote_per_thread(table)
    return _apply(run, table, candidates)


def _candidate_groups(pgs: pd.DataFrame, known: GroupMap) -> dict[int, list[tuple[str, str, tuple[int, ...]]]]:
    """rank -> [(pg name, dim, ranks)] of the parallel-dimension groups it belongs to (size >= 2).

    The dimension comes from the group's description ("mesh_tp"), else from the run's manifest
    (a one-dimensional mesh uses the default group, described as "default_pg")."""
    out: dict[int, list[tuple[str, str, tuple[int, ...]]]] = {}
    for row in pgs.itertuples():
        ranks = tuple(int(r) for r in row.ranks)
        if len(ranks) < 2:
            continue
        m = _MESH_DESC.fullmatch(str(row.desc))
        lane = known.lane(str(row.name), ranks)
        dim = m.group(1) if m else (lane.split(".", 1)[1] if lane != GENERIC_LANE else "")
        if dim:
            out.setdefault(int(row.rank), []).append((str(row.name), dim, ranks))
    return out


def _work_table(spans: pd.DataFrame, raw: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    kinds = spans["kind"].astype(str).to_numpy()[rows]
    return pd.DataFrame({
        "row": rows, "rank": spans["rank"].to_numpy()[rows], "kind": kinds,
        "family": [_FAMILY.get(k, k) for k in kinds], "bytes": spans["bytes"].to_numpy()[rows],
        "start": spans["start_s"].to_numpy()[rows], "end": spans["end_s"].to_numpy()[rows],
        "thread": raw["stream"].to_numpy()[rows], "old_group": spans["group"].astype(str).to_numpy()[rows],
    })


def _best_group(row: object, table: pd.DataFrame, candidates: dict[int, list[tuple[str, str, tuple[int, ...]]]]) -> str:
    """The candidate group whose other members all have an overlapping twin, ending closest.

    Point-to-point transfers are looked for in the pipeline (and context-parallel) groups first:
    in training they carry pipeline activations (and ring-attention blocks); all-to-alls in the
    expert-parallel group (MoE token dispatch/combine), which may have the rank set of another."""
    groups = candidates.get(int(row.rank), [])  # type: ignore[attr-defined]
    if row.family == "p2p":  # type: ignore[attr-defined]
        groups = [g for g in groups if g[1] in P2P_DIMS] or groups
        if len(groups) == 1:
            return groups[0][0]
    if row.family == Collective.ALL_TO_ALL:  # type: ignore[attr-defined]
        groups = [g for g in groups if g[1] in A2A_DIMS] or groups
        if len(groups) == 1:
            return groups[0][0]
    best, best_gap = "", np.inf
    for name, _dim, ranks in groups:
        gaps = [_twin_gap(row, table, peer) for peer in ranks if peer != row.rank]  # type: ignore[attr-defined]
        gap = max(gaps) if gaps else np.inf
        if gap < best_gap:
            best, best_gap = name, gap
    return best


def _twin_gap(row: object, table: pd.DataFrame, peer: int) -> float:
    """|end difference| to the peer's closest same-collective span overlapping this one (inf if none)."""
    r = row  # a namedtuple row of the work table
    same = table[(table["rank"] == peer) & (table["family"] == r.family) & (table["bytes"] == r.bytes)]  # type: ignore[attr-defined]
    if r.family == "p2p":  # type: ignore[attr-defined]
        same = same[same["kind"] != r.kind]  # type: ignore[attr-defined]
    overlapping = same[(same["start"] < r.end) & (same["end"] > r.start)]  # type: ignore[attr-defined]
    if overlapping.empty:
        return np.inf
    return float(np.abs(overlapping["end"].to_numpy() - r.end).min())  # type: ignore[attr-defined]


def _vote_per_thread(table: pd.DataFrame) -> pd.Series:
    """Every span on a worker thread gets the thread's majority group (p2p keeps its own)."""
    out = table["pg"].copy()
    for (_rank, _thread), part in table.groupby(["rank", "thread"]):
        if (part["family"] == "p2p").all():
            continue
        votes = Counter(pg for pg in part["pg"] if pg)
        if votes:
            out.loc[part.index] = votes.most_common(1)[0][0]
    return out


def _apply(run: ParsedRun, table: pd.DataFrame, candidates: dict[int, list[tuple[str, str, tuple[int, ...]]]]) -> ParsedRun:
    """Write lanes, group keys and raw pg/pg_ranks for the work spans and their call spans."""
    dims = {(rank, name): (dim, ranks) for rank, groups in candidates.items() for name, dim, ranks in groups}
    table = table[table["pg"] != ""].sort_values(["rank", "pg", "start"], kind="stable")
    table["seq"] = table.groupby(["rank", "pg"]).cumcount()
    remap = {(int(r), g): (pg, int(s)) for r, g, pg, s in zip(table["rank"], table["old_group"], table["pg"], table["seq"], strict=True)}
    spans, raw = run.timeline.spans.copy(), run.raw.copy()
    keys = list(zip(spans["rank"].astype(int), spans["group"].astype(str), strict=True))
    hit = np.asarray([k in remap for k in keys])
    lanes = spans["lane"].astype(str).to_numpy().copy()
    groups = spans["group"].astype(str).to_numpy().copy()
    pg_col, ranks_col, seq_col = raw["pg"].to_numpy().copy(), raw["pg_ranks"].to_numpy().copy(), raw["seq"].to_numpy().copy()
    for i in np.flatnonzero(hit & (lanes == GENERIC_LANE)):
        pg, seq = remap[keys[i]]
        dim, ranks = dims[(keys[i][0], pg)]
        lanes[i], groups[i] = dim_lane(dim), f"{pg}#{seq}"
        pg_col[i], ranks_col[i], seq_col[i] = pg, str(list(ranks)), seq
    spans["lane"] = pd.Categorical(lanes)
    spans["group"] = groups
    raw["pg"], raw["pg_ranks"], raw["seq"] = pg_col, ranks_col, seq_col
    counts = table.groupby(["pg", "rank"]).size().groupby("pg").nunique()
    warnings = [f"process group {pg}: members issued different numbers of collectives" for pg, n in counts.items() if n > 1]
    meta = dataclasses.replace(run.timeline.meta, warnings=(*run.timeline.meta.warnings, *warnings),
                               gloo_groups="inferred by cross-rank matching (gloo traces do not name groups)")
    return replace(run, timeline=Timeline(spans, meta), raw=raw)
