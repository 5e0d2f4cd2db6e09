"""Unfolded simulations: every collective task meets exactly the ranks of the group its op is
priced over. The engine runs a collective once when all tasks of its group key have arrived
(:class:`sim.engine.Engine`, and the flow transport runs the group's flows once); a key that
names one rank would run the group's flows once per member (in flow mode, that many times the
traffic) and let members start apart."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from core.vocab import COLLECTIVE_OPS
from sim.job import resolve_job
from sim.simulate import build_priced

BASE: dict[str, Any] = {"cluster": "dgx-h100", "nodes": 2, "full": True, "layers": 4}
JOBS: dict[str, dict[str, Any]] = {
    "megatron dense": {"model": "llama3-8b", "tp": 2, "pp": 2, "dp": 4, "zero": 1, "global_batch": 16},
    "torch FSDP with PP": {"model": "llama3-8b", "tp": 2, "pp": 2, "dp": 4, "zero": 3, "framework": "torch",
                           "global_batch": 16},
    "hybrid sharding": {"model": "llama3-8b", "tp": 1, "pp": 1, "dp": 16, "zero": 3, "framework": "torch",
                        "global_batch": 16, "layers": 2, "dp_replicate": 2},
    "MoE, EDP of 2": {"model": "mixtral-8x7b", "tp": 1, "pp": 2, "dp": 8, "ep": 4, "zero": 1, "global_batch": 16},
    "MoE, DualPipeV overlap": {"model": "mixtral-8x7b", "tp": 1, "pp": 2, "dp": 8, "ep": 4, "zero": 1,
                               "global_batch": 32, "schedule": "dualpipev", "vpp": 2},
    "MoE, torch runtime": {"model": "mixtral-8x7b", "tp": 1, "pp": 2, "dp": 8, "ep": 4, "zero": 2,
                           "framework": "torch", "global_batch": 16, "sequence_parallel": True},
    "MoE, TP and EP, overlap": {"model": "mixtral-8x7b", "tp": 2, "pp": 2, "dp": 4, "ep": 2, "zero": 1,
                                "global_batch": 16, "sequence_parallel": True, "schedule": "dualpipev", "vpp": 2},
}


@pytest.mark.parametrize("name", list(JOBS))
def test_each_collective_meets_its_priced_group(name: str) -> None:
    spec = {**BASE, **JOBS[name]}
    priced = build_priced(resolve_job(spec))
    members: dict[str, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
    checked = 0
    for task in priced.graph.tasks:
        if not task.lane.startswith("comm.") or task.peer >= 0:
            continue
        op = task.ops[-1]
        if op.op_class not in COLLECTIVE_OPS or not op.dim:
            continue
        group = tuple(priced.coster.group(op.dim, task.rank))
        if len(group) < 2:
            continue
        assert task.group, f"{task.lane} {task.name} on rank {task.rank} has no group key"
        members[task.group].append((task.rank, group))
        checked += 1
    assert checked > 0
    for key, arrivals in members.items():
        assert sorted(rank for rank, _ in arrivals) == sorted(arrivals[0][1]), key
