"""Communication groups: one value per group, written the way group keys show it."""

from __future__ import annotations

from core.groups import DP, PP, TP, Axis, CommGroup, DeepEP


def test_groups_are_values() -> None:
    assert CommGroup(Axis.TP) == TP and hash(CommGroup(Axis.DP)) == hash(DP) and TP != PP
    assert CommGroup.expert(Axis.EP, 8, 1) != CommGroup.expert(Axis.EP, 8, 2)
    assert len({CommGroup.hybrid(Axis.DP_SHARD, 2), CommGroup.hybrid(Axis.DP_SHARD, 2)}) == 1


def test_names() -> None:
    assert [str(g) for g in (TP, PP, DP)] == ["tp", "pp", "dp"]
    assert CommGroup.hybrid(Axis.DP_SHARD, 2).name == "dps:2"
    assert CommGroup.hybrid(Axis.DP_REPLICATE, 4).name == "dpr:4"
    assert CommGroup.expert(Axis.EDP, 8, 2).name == "edp:8:2"
    deepep = DeepEP(experts=256, top_k=8, round_robin=True)
    assert f"{CommGroup.expert(Axis.EP, 64, 1, deepep)}/0" == "ep:64:1:deepep256x8rr/0"
    assert CommGroup.expert(Axis.EP, 64, 1, DeepEP(experts=256, top_k=8)).name == "ep:64:1:deepep256x8"


def test_kinds_of_group() -> None:
    assert CommGroup.expert(Axis.ETP, 4, 2).is_expert and not DP.is_expert
    assert CommGroup.hybrid(Axis.DP_REPLICATE, 2).is_hybrid and not DP.is_hybrid
    assert DeepEP(experts=8, top_k=2).routing == "uniform"
    assert DeepEP(experts=8, top_k=2, round_robin=True).routing == "round-robin"
