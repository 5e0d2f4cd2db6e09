"""Which communication items belong together across ranks.

Collectives: the parser keys every collective "<process group>#<sequence number>" (the n-th
collective of that group on that rank; for old NCCL traces without group names "#<n>" over the
default group). An instance is accepted when every traced member of its group has exactly one
item with the key, they are of one kind (and one size, except all_to_all, whose splits may
differ) and the last member arrived before any member finished (they overlapped, as members of
one collective do). Items of rejected instances are matched again by completion time (members of
one collective finish within a few microseconds of each other on a shared clock): this repairs
sequence numbers shifted by events missing from a sampled trace. What still has no partner is
replayed with its measured duration, uncoupled, and counted in the report.

Point-to-point transfers (gloo send/recv, NCCL Send/Recv kernels): the k-th send from rank a to
rank b is received by the k-th receive on b from a, unless that send was posted after the
receive ended (then the receive takes the earliest send that could have fed it). The peer is
the other member of a two-rank process group; in larger groups it is found by size and time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.vocab import Kind
from profiler.kineto.groups import parse_ranks
from profiler.replay.items import P2P_KINDS, TRANSFER_SOURCES

END_TOLERANCE_S = 50e-6  # members of one collective end this close together (shared clock)


@dataclass
class Matching:
    """Collective instances and point-to-point pairs, as item indices, plus what was left over.

    Attributes:
        collectives: key -> item indices of its members (one per traced member rank).
        p2p: (send item, recv item) pairs.
        by_key, by_time: instances accepted by their key / re-matched by completion time.
        unmatched: communication items replayed uncoupled.
        absent_members: instances whose group includes ranks that are not in the trace.
        notes: human-readable lines for the report.
    """

    collectives: dict[str, list[int]] = field(default_factory=dict)
    p2p: list[tuple[int, int]] = field(default_factory=list)
    by_key: int = 0
    by_time: int = 0
    unmatched: list[int] = field(default_factory=list)
    absent_members: int = 0
    comm_items: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def matched_fraction(self) -> float:
        """Share of communication items that found their peers (1.0 when there are none)."""
        return 1.0 - len(self.unmatched) / self.comm_items if self.comm_items else 1.0


def _members(pg_ranks: str, present: set[int]) -> set[int]:
    ranks = set(parse_ranks(pg_ranks))
    return (ranks & present) if ranks else set(present)


def _consistent(part: pd.DataFrame, expected: set[int]) -> bool:
    if set(part["rank"]) != expected or len(part) != len(expected) or len(part) < 2:
        return False
    if part["kind"].nunique() != 1:
        return False
    if part["kind"].iloc[0] != Kind.ALL_TO_ALL and part["bytes"].nunique() != 1:
        return False
    return bool(part["start_s"].max() <= part["end_s"].min() + 1e-9)


def _is_p2p(items: pd.DataFrame) -> np.ndarray:
    return items["kind"].isin(P2P_KINDS).to_numpy()


def match_collectives(items: pd.DataFrame, m: Matching) -> None:
    """Fill ``m.collectives`` from the items' keys, then by completion time."""
    comm = items[items["source"].isin(TRANSFER_SOURCES).to_numpy() & ~_is_p2p(items)]
    present = set(int(r) for r in items["rank"].unique())
    rejected: list[int] = []
    for key, part in comm.groupby("group", sort=True):
        expected = _members(str(part["pg_ranks"].iloc[0]), present)
        if len(expected) < 2:
            continue
        if _consistent(part, expected):
            m.collectives[str(key)] = part.index.tolist()
            m.by_key += 1
        else:
            rejected.extend(part.index.tolist())
    _match_by_time(items.loc[rejected], present, m)
    m.comm_items += len(comm)


def _has_absent(pg_ranks: str, present: set[int], world_size: int) -> bool:
    ranks = set(parse_ranks(pg_ranks))
    return bool(ranks - present) if ranks else len(present) < world_size


def _match_by_time(left: pd.DataFrame, present: set[int], m: Matching) -> None:
    """Group leftovers of one (group, kind) whose ends agree within END_TOLERANCE_S."""
    left = left.assign(_pg=left["pg"], _kind=left["kind"]).sort_values("end_s", kind="stable")
    for (_pg, _kind), part in left.groupby(["_pg", "_kind"], sort=True):
        expected = _members(str(part["pg_ranks"].iloc[0]), present)
        used: set[int] = set()
        ends, ranks, idx = part["end_s"].to_numpy(), part["rank"].to_numpy(), part.index.to_numpy()
        for i in range(len(part)):
            if idx[i] in used:
                continue
            near = [j for j in range(i, len(part)) if ends[j] - ends[i] <= END_TOLERANCE_S and idx[j] not in used]
            chosen = {int(ranks[j]): int(idx[j]) for j in reversed(near)}
            cluster = part.loc[list(chosen.values())]
            if set(chosen) == expected and _consistent(cluster.assign(bytes=0.0), expected):
                m.collectives[f"time:{_pg}#{m.by_time}"] = sorted(chosen.values())
                m.by_time += 1
                used.update(chosen.values())
        m.unmatched.extend(int(i) for i in idx if i not in used)


def _peer(item: pd.Series) -> int:
    ranks = parse_ranks(item["pg_ranks"])
    others = [r for r in ranks if r != item["rank"]]
    return others[0] if len(others) == 1 else -1


def match_p2p(items: pd.DataFrame, m: Matching) -> None:
    """Pair sends and receives FIFO per (group, source rank, destination rank)."""
    p2p = items[items["source"].isin(TRANSFER_SOURCES).to_numpy() & _is_p2p(items)]
    m.comm_items += len(p2p)
    queues: dict[tuple[str, int, int, str], list[int]] = defaultdict(list)
    unknown: list[int] = []
    for i, row in p2p.sort_values("start_s", kind="stable").iterrows():
        peer = _peer(row)
        if peer < 0:
            unknown.append(int(i))
            continue
        src, dst = (row["rank"], peer) if row["kind"] == Kind.SEND else (peer, row["rank"])
        queues[(str(row["pg"]), int(src), int(dst), str(row["kind"]))].append(int(i))
    for (pg, src, dst, kind), sends in sorted(queues.items()):
        if kind == Kind.SEND:
            _pair_fifo(items, sends, queues.get((pg, src, dst, "recv"), []), m)
    for (pg, src, dst, kind), recvs in queues.items():
        if kind == Kind.RECV and (pg, src, dst, "send") not in queues:
            m.unmatched.extend(recvs)
    m.unmatched.extend(_match_unknown_peers(items, unknown, m))


def _pair_fifo(items: pd.DataFrame, sends: list[int], recvs: list[int], m: Matching) -> None:
    """Each receive (in post order) takes the earliest unpaired send of its size posted before
    the receive ended; a receive no send could have fed stays unmatched."""
    free = list(sends)
    for r in recvs:
        fits = [s for s in free if items.at[s, "start_s"] <= items.at[r, "end_s"] + 1e-9
                and (items.at[s, "bytes"] == items.at[r, "bytes"] or not items.at[s, "bytes"] or not items.at[r, "bytes"])]
        if fits:
            free.remove(fits[0])
            m.p2p.append((fits[0], r))
        else:
            m.unmatched.append(r)
    m.unmatched.extend(free)


def _match_unknown_peers(items: pd.DataFrame, rows: list[int], m: Matching) -> list[int]:
    """Sends/receives without a known peer: pair each send with the earliest unpaired receive of
    the same size on another rank that ends after the send was posted."""
    part = items.loc[rows].sort_values("start_s", kind="stable")
    recvs = [i for i in part.index if part.at[i, "kind"] == "recv"]
    taken: set[int] = set()
    left = []
    for s in (i for i in part.index if part.at[i, "kind"] == "send"):
        cand = [r for r in recvs if r not in taken and part.at[r, "rank"] != part.at[s, "rank"]
                and part.at[r, "bytes"] == part.at[s, "bytes"] and part.at[r, "end_s"] >= part.at[s, "start_s"]]
        if cand:
            taken.add(cand[0])
            m.p2p.append((int(s), int(cand[0])))
        else:
            left.append(int(s))
    return left + [int(r) for r in recvs if r not in taken]


def match_communication(items: pd.DataFrame, world_size: int) -> Matching:
    """Match collectives and point-to-point transfers of the items (see module docstring)."""
    m = Matching()
    match_collectives(items, m)
    match_p2p(items, m)
    m.unmatched = sorted(set(m.unmatched))
    present = set(int(r) for r in items["rank"].unique())
    m.absent_members = sum(_has_absent(str(items.at[ids[0], "pg_ranks"]), present, world_size)
                           for ids in m.collectives.values())
    m.notes.extend(_notes(items, m))
    return m


def _notes(items: pd.DataFrame, m: Matching) -> list[str]:
    notes = [f"collectives: {m.by_key} instances matched by process group and sequence number"
             + (f", {m.by_time} re-matched by completion time" if m.by_time else "")
             + (f"; p2p: {len(m.p2p)} send/recv pairs" if m.p2p else "")]
    if m.unmatched:
        notes.append(f"{len(m.unmatched)} of {m.comm_items} communication spans found no peer in the "
                     "trace; they are replayed with their measured duration, not coupled to other ranks")
    if m.absent_members:
        notes.append(f"{m.absent_members} collective instances include ranks absent from the trace; "
                     "only the traced members are coupled (absent ranks' effect stays frozen in the "
                     "measured durations)")
    return notes
