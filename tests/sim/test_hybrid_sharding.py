"""Hybrid sharding (FSDP HYBRID_SHARD / torchtitan dp_replicate): groups, collectives, memory and
plan checks against the layout and the FSDP2 reduction it models (sim.hybrid_groups,
schedules.passes.dp_torch)."""

from __future__ import annotations

import pytest

from schedules.memory import fsdp_state_bytes
from sim.hybrid_groups import hybrid_groups
from sim.job import resolve_job
from sim.memory import MemoryModel
from sim.simulate import build_priced, make_placement, simulate
from topo.placement import Placement

HSDP = {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 4, "tp": 1, "pp": 1, "dp": 32, "zero": 3,
        "framework": "torch", "global_batch": 32, "layers": 4}


def test_replicas_are_outermost_and_groups_cross_them_at_the_same_place() -> None:
    placement = Placement(sizes={"tp": 2, "cp": 1, "dp": 8, "pp": 1}, order=("tp", "cp", "dp", "pp"))
    # rank = tp + 2 * dp; 2 replicas of 4 DP ranks: replica 0 holds dp 0-3 (ranks 0,2,4,6 at tp 0)
    _, shards = hybrid_groups(placement, "dps", 2)
    assert sorted(shards) == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    _, replicas = hybrid_groups(placement, "dpr", 2)
    assert sorted(replicas) == [(0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15)]


def test_each_unit_reduce_scatters_in_its_replica_then_all_reduces_its_shard_across_replicas() -> None:
    job = resolve_job({**HSDP, "dp_replicate": 4})
    p = build_priced(job)
    plan = job.plan
    assert (plan.zero_shard, str(plan.shard_dim), str(plan.replicate_dim)) == (8, "dps:4", "dpr:4")
    ops = [(t, op) for t in p.graph.tasks if t.rank == 0 and t.step == 0 for op in t.ops if op.op_class in
           ("all_gather", "reduce_scatter", "all_reduce")]
    scatters = {t.layer: op for t, op in ops if op.op_class == "reduce_scatter"}
    reduces = {t.layer: op for t, op in ops if op.op_class == "all_reduce"}
    gathers = [op for _, op in ops if op.op_class == "all_gather"]
    assert scatters and set(scatters) == set(reduces)
    for unit, rs in scatters.items():
        assert str(rs.dim) == "dps:4" and str(reduces[unit].dim) == "dpr:4"
        assert reduces[unit].bytes == pytest.approx(rs.bytes / 8)  # the shard of one replica's 8 ranks
    assert gathers and all(str(op.dim) == "dps:4" for op in gathers)
    coster = p.coster
    assert coster.group(plan.shard_dim, 0) == tuple(range(8))  # one node's 8 GPUs
    assert coster.group(plan.replicate_dim, 0) == (0, 8, 16, 24)  # one GPU per node


def test_states_are_sharded_over_a_replica() -> None:
    hybrid = resolve_job({**HSDP, "dp_replicate": 4})
    one_node = resolve_job({**HSDP, "nodes": 1, "dp": 8, "global_batch": 8})
    result = simulate(hybrid)
    mm = MemoryModel(hybrid.model, hybrid.plan, result.schedule)
    states, _ = mm.state_bytes(0)
    expected = fsdp_state_bytes(mm.rank_params(0), 8)
    assert (states.params, states.grads, states.optimizer) == pytest.approx(
        (expected.params, expected.grads, expected.optimizer))
    # a replica holds what plain FSDP on its 8 ranks holds
    plain = simulate(one_node)
    assert result.memory_timelines[0].peak_bytes == pytest.approx(plain.memory_timelines[0].peak_bytes, rel=1e-6)


def test_gathers_stay_in_the_node_and_the_network_carries_one_shard_per_unit() -> None:
    """Full sharding over 4 nodes gathers every unit over the network; hybrid sharding gathers it
    over the node's NVLink (faster), and what crosses the network is the all-reduce of one
    replica rank's shard, 1/8 of the unit (per node, 2 (R-1)/R of a unit for the all-reduce,
    against one unit for each of full sharding's two all-gathers and its reduce-scatter)."""
    full = build_priced(resolve_job(HSDP))
    hybrid = build_priced(resolve_job({**HSDP, "dp_replicate": 4}))

    def durations(p, kind):
        return [p.coster.op_duration(op, 0) for t in p.graph.tasks if t.rank == 0 and t.step == 0
                for op in t.ops if op.op_class == kind and op.bytes > 0]

    full_ag, hybrid_ag = durations(full, "all_gather"), durations(hybrid, "all_gather")
    assert len(full_ag) == len(hybrid_ag) and all(h < f for h, f in zip(hybrid_ag, full_ag, strict=True))
    assert durations(full, "all_reduce") == [] and len(durations(hybrid, "all_reduce")) > 0


@pytest.mark.parametrize(("settings", "message"), [
    ({"dp_replicate": 3}, r"^dp_replicate=3 is invalid: must divide dp=32"),
    ({"dp_replicate": 32}, r"^dp_replicate=32 is invalid: must divide dp=32 and leave at least two"),
    ({"dp_replicate": 4, "zero": 1}, r"^dp_replicate=4 is invalid: hybrid sharding .* needs zero=3 and framework=torch"),
    ({"dp_replicate": 4, "framework": "megatron"}, r"^dp_replicate=4 is invalid: hybrid sharding"),
])
def test_invalid_hybrid_plans_are_one_line_errors(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_job({**HSDP, **settings})


def test_placement_of_a_hybrid_job_is_the_plain_grid() -> None:
    job = resolve_job({**HSDP, "dp_replicate": 4})
    assert make_placement(job).sizes == {"tp": 1, "cp": 1, "dp": 32, "pp": 1}
