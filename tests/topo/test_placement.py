"""Rank placement against a brute-force enumeration of coordinates."""

from __future__ import annotations

import itertools

import pytest

from topo import Placement


def brute(sizes: dict[str, int], order: tuple[str, ...]) -> dict[int, dict[str, int]]:
    """rank -> coords by counting with the first dimension of ``order`` fastest."""
    out, rank = {}, 0
    ranges = [range(sizes.get(d, 1)) for d in reversed(order)]
    for combo in itertools.product(*ranges):
        out[rank] = dict(zip(reversed(order), combo, strict=True))
        rank += 1
    return out


@pytest.mark.parametrize("order", [("tp", "cp", "dp", "pp"), ("dp", "tp", "pp", "cp"),
                                   ("pp", "dp", "cp", "tp")])
def test_coords_groups_match_enumeration(order: tuple[str, ...]) -> None:
    sizes = {"tp": 4, "cp": 1, "dp": 3, "pp": 2}
    p = Placement(sizes=sizes, order=order)
    table = brute(sizes, order)
    assert p.world_size == 24
    for rank, coords in table.items():
        assert p.coords_of(rank) == coords
        assert p.rank_of(**coords) == rank
    for dim in order:
        groups = p.groups(dim)
        assert sorted(r for g in groups for r in g) == list(range(24))
        for g in groups:
            assert len(g) == sizes[dim]
            others = [{k: v for k, v in table[r].items() if k != dim} for r in g]
            assert all(o == others[0] for o in others)
            assert [table[r][dim] for r in g] == list(range(sizes[dim]))
            assert p.group(dim, g[-1]) == g


def test_innermost_dimension_is_consecutive() -> None:
    p = Placement(sizes={"tp": 8, "dp": 4})
    assert p.group("tp", 10) == tuple(range(8, 16))
    assert p.group("dp", 3) == (3, 11, 19, 27)
    across = Placement(sizes={"tp": 8, "dp": 4}, order=("dp", "tp", "cp", "pp"))
    assert across.group("tp", 0) == (0, 4, 8, 12, 16, 20, 24, 28)


def test_placement_validation() -> None:
    with pytest.raises(ValueError, match="ep"):
        Placement(sizes={"ep": 2})
    with pytest.raises(ValueError, match="tp"):
        Placement(sizes={"tp": 0})
    with pytest.raises(ValueError, match="order"):
        Placement(sizes={"tp": 2}, order=("tp", "tp"))
    p = Placement(sizes={"tp": 2, "dp": 2})
    with pytest.raises(ValueError, match="rank"):
        p.coords_of(4)
    with pytest.raises(ValueError, match="dp"):
        p.rank_of(tp=1)
    assert p.rank_of(tp=1, dp=1) == 3
    assert hash(p) == hash(Placement(sizes={"dp": 2, "tp": 2}))
    assert p == Placement(sizes={"tp": 2, "dp": 2, "pp": 1})
