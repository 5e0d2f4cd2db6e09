"""Process groups: which parallel dimension (tp/pp/dp/cp) a collective's group is.

New NCCL traces name the group of each collective (``Process Group Name`` and
``Process Group Ranks`` on the kernel or on ``record_param_comms``). Which *dimension* that group
is comes from the run's ``manifest.json`` (written by the trainer), read in either form:

    {"process_groups": {"tp": [{"pg_name": "1", "ranks": [0, 1]}, ...], "dp": [...]}}
        (the trainer's form: per mesh dim, its groups as in Kineto's pg_config)
    {"process_groups": [{"name": "1", "dim": "tp", "ranks": [0, 1]}, ...]}
    {"process_groups": {"1": "tp", "2": "dp"}}               (name -> dim)
    {"mesh": {"shape": [2, 2, 2], "dim_names": ["pp", "dp", "tp"], "ranks": [[[0, 1], ...]]}}
        (DeviceMesh layout, ``ranks`` defaulting to arange(prod(shape)).reshape(shape); a group
         is the ranks that differ only along one dim)

Names win over rank sets; for rank sets the first dim listed wins (so "world" never hides a
dim that spans every rank).

Without a manifest, or for a group it does not know, the lane is the generic ``"comm"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.run_manifest import MANIFEST, load_manifest

GENERIC_LANE = "comm"
_DIM_LANE = {"tp": "comm.tp", "sp": "comm.tp", "pp": "comm.pp", "dp": "comm.dp", "cp": "comm.cp",
             "fsdp": "comm.dp", "zero": "comm.dp", "dp_shard": "comm.dp",
             "dp_replicate": "comm.dp", "dp_cp": "comm.dp", "dp_shard_cp": "comm.dp",
             "ep": "comm.ep", "edp": "comm.dp"}  # expert parallel; expert data parallel
_INT_RE = re.compile(r"-?\d+")
_MAX_RANK = 1 << 31
_MAX_RANKS_TEXT = 1 << 24


def dim_lane(dim: str) -> str:
    """Timeline lane of a mesh dimension name ("tp" -> "comm.tp"); unknown -> "comm"."""
    return _DIM_LANE.get(dim.strip().lower(), GENERIC_LANE)


def parse_ranks(value: Any) -> tuple[int, ...]:
    """``"[0, 1]"`` (a string in traces) or a list -> a tuple of ranks; () if absent."""
    if isinstance(value, (list, tuple)):
        return tuple(r for r in (_small_int(v) for v in value) if r is not None)
    if isinstance(value, str):
        return tuple(int(v) for v in _INT_RE.findall(value[:_MAX_RANKS_TEXT]) if len(v) < 10)
    return ()


def _small_int(value: Any) -> int | None:
    """An int (or integral float / integer string) below 2^31 in magnitude, else None."""
    if type(value) is bool or isinstance(value, (list, dict)) or value is None:
        return None
    try:
        out = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out is not None and abs(out) < _MAX_RANK else None


@dataclass(frozen=True)
class GroupMap:
    """Process group name / rank set -> Timeline lane."""

    by_name: dict[str, str] = field(default_factory=dict)
    by_ranks: dict[tuple[int, ...], str] = field(default_factory=dict)

    def lane(self, name: str, ranks: tuple[int, ...]) -> str:
        """Lane of a group, by name first, then by its sorted rank set; "comm" when unknown."""
        if name and name in self.by_name:
            return self.by_name[name]
        return self.by_ranks.get(tuple(sorted(ranks)), GENERIC_LANE) if ranks else GENERIC_LANE


def _mesh_groups(mesh: dict[str, Any]) -> dict[tuple[int, ...], str]:
    shape = [int(s) for s in mesh.get("shape", [])]
    names = [str(n) for n in mesh.get("dim_names", [])]
    if not shape or len(shape) != len(names):
        raise ValueError(f"manifest mesh needs 'shape' and 'dim_names' of equal length, got {mesh}")
    grid = np.asarray(mesh["ranks"]) if "ranks" in mesh else np.arange(int(np.prod(shape)))
    grid = grid.reshape(shape)
    out: dict[tuple[int, ...], str] = {}
    for axis, dim in enumerate(names):
        if shape[axis] < 2:
            continue
        moved = np.moveaxis(grid, axis, -1).reshape(-1, shape[axis])
        for row in moved:
            out[tuple(int(r) for r in row)] = dim_lane(dim)
    return out


def group_map_from_manifest(manifest: dict[str, Any]) -> GroupMap:
    """Build the mapping from a manifest dict (forms in the module docstring)."""
    by_name: dict[str, str] = {}
    by_ranks: dict[tuple[int, ...], str] = {}
    pgs = manifest.get("process_groups", [])
    items = pgs.items() if isinstance(pgs, dict) else enumerate(pgs)
    for key, entry in items:
        if isinstance(entry, str):
            by_name[str(key)] = dim_lane(entry)
            continue
        if isinstance(entry, list) and isinstance(pgs, dict):  # dim -> [groups]
            for group in entry:
                _add_group(by_name, by_ranks, {"dim": key, **group} if isinstance(group, dict) else group)
            continue
        _add_group(by_name, by_ranks, entry, key if isinstance(pgs, dict) else None)
    if isinstance(manifest.get("mesh"), dict):
        for ranks, lane in _mesh_groups(manifest["mesh"]).items():
            by_ranks.setdefault(ranks, lane)
    return GroupMap(by_name=by_name, by_ranks=by_ranks)


def _add_group(by_name: dict[str, str], by_ranks: dict[tuple[int, ...], str], entry: Any,
               key: Any = None) -> None:
    """Record one {"dim", "name"/"pg_name", "ranks"} entry (names: first wins too)."""
    if not isinstance(entry, dict) or "dim" not in entry:
        raise ValueError(f"manifest process_groups entry needs a 'dim': {entry!r}")
    lane = dim_lane(str(entry["dim"]))
    name = entry.get("name", entry.get("pg_name", key))
    if name is not None and name != "":
        by_name.setdefault(str(name), lane)
    ranks = parse_ranks(entry.get("ranks"))
    if len(ranks) > 1:
        by_ranks.setdefault(tuple(sorted(ranks)), lane)


def read_manifest(directory: Path) -> tuple[dict[str, Any] | None, GroupMap]:
    """``manifest.json`` beside the traces, checked (:func:`profiler.run_manifest.load_manifest`),
    and its process groups (None and an empty map when absent)."""
    manifest = load_manifest(directory)
    if manifest is None:
        return None, GroupMap()
    try:
        return manifest, group_map_from_manifest(manifest)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{Path(directory) / MANIFEST}: {exc}") from None


def pg_config_groups(header: dict[str, Any]) -> list[dict[str, Any]]:
    """Process groups listed in ``distributedInfo.pg_config`` (new traces), normalised."""
    info = header.get("distributedInfo") or {}
    configs = info.get("pg_config") if isinstance(info, dict) else None
    out = []
    for pg in configs if isinstance(configs, list) else []:
        if isinstance(pg, dict):
            size = _small_int(pg.get("pg_size", 0) or 0)
            out.append({"name": str(pg.get("pg_name", "")), "desc": str(pg.get("pg_desc", "")),
                        "ranks": parse_ranks(pg.get("ranks")),
                        "size": size if size is not None and size >= 0 else 0})
    return out

