"""Expert parallelism in the simulator: EP/EDP/ETP groups in Megatron-Core's rank order, the
pricer's groups, MoE step time and memory."""

import pytest

from sim.placement import expert_groups, parse_expert_dim
from topo.placement import Placement


def _groups(placement, dim, ep, etp):
    return expert_groups(placement, dim, ep, etp)[1]


def test_ep_groups_follow_megatron_core_rank_order():
    # Megatron-Core RankGenerator(tp=etp, ep, dp=edp, pp, order="tp-ep-dp-pp") over the
    # (tp, cp, dp) ranks of a stage, TP innermost: with etp=1 an EP group is ep consecutive ranks
    p = Placement(sizes={"tp": 2, "dp": 8, "pp": 2})
    assert _groups(p, "ep", 4, 1)[:4] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert _groups(p, "edp", 4, 1)[:2] == [(0, 4, 8, 12), (1, 5, 9, 13)]
    # etp = tp = 2: expert-TP pairs are the TP pairs, EP strides over them, EDP over EP
    assert _groups(p, "etp", 4, 2)[0] == (0, 1)
    assert _groups(p, "ep", 4, 2)[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert _groups(p, "edp", 4, 2)[0] == (0, 8)
    # a second pipeline stage holds its own groups
    assert _groups(p, "ep", 4, 2)[-1] == (25, 27, 29, 31)


def test_groups_partition_each_stage():
    p = Placement(sizes={"tp": 4, "cp": 2, "dp": 8, "pp": 2})
    for dim, size in (("ep", 8), ("edp", 4), ("etp", 2)):
        groups = _groups(p, dim, 8, 2)
        assert all(len(g) == size for g in groups)
        assert sorted(r for g in groups for r in g) == list(range(p.world_size))


def test_expert_dims_parse():
    assert parse_expert_dim("ep:8:2") == ("ep", 8, 2)
    assert parse_expert_dim("dp") is None
    with pytest.raises(ValueError, match="^ep=3 is invalid"):
        expert_groups(Placement(sizes={"dp": 8}), "ep", 3, 1)
