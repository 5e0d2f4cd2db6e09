"""Registry, input validation, and completeness + deadlock freedom of every schedule on a grid."""

from __future__ import annotations

import pytest

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline import build_schedule, check_schedule, execute_unit_costs, schedule_names

CHUNKS = {"gpipe": (1,), "1f1b": (1,), "zb-h1": (1,), "interleaved": (2, 3, 4),
          "interleaved-megatron": (2, 3, 4), "interleaved-zb": (1, 2, 3, 4), "zbv": (2,),
          "dualpipev": (2,)}


def test_names_are_the_documented_set() -> None:
    assert set(schedule_names()) == set(CHUNKS)
    assert len(schedule_names()) == len(set(schedule_names()))


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown pipeline schedule 'pipedream'") as err:
        build_schedule("pipedream", 4, 8)
    for name in schedule_names():
        assert name in str(err.value)


@pytest.mark.parametrize("field, args", [("pp", (0, 8, 1)), ("microbatches", (4, 0, 1)),
                                         ("vpp", (4, 8, 0)), ("pp", (2.0, 8, 1)),
                                         ("microbatches", (4, True, 1))])
@pytest.mark.parametrize("name", sorted(CHUNKS))
def test_bad_sizes_name_the_field(name: str, field: str, args: tuple) -> None:
    with pytest.raises(ValueError, match=rf"^{field}=.* is invalid: expected an integer >= 1$"):
        build_schedule(name, *args)


@pytest.mark.parametrize("name, vpp", [("gpipe", 2), ("1f1b", 2), ("zb-h1", 3), ("interleaved", 1),
                                       ("interleaved-megatron", 1), ("zbv", 1), ("zbv", 3),
                                       ("dualpipev", 4)])
def test_wrong_chunk_count_is_rejected(name: str, vpp: int) -> None:
    with pytest.raises(ValueError, match=rf"^vpp={vpp} is invalid: .*{name}"):
        build_schedule(name, 4, 8, vpp)


@pytest.mark.parametrize("name, pp, m, vpp, valid", [
    ("interleaved", 4, 9, 2, "multiple of rounds"),          # rounds = 2, 9 % 2 != 0 (torch too)
    ("interleaved-zb", 4, 9, 2, "multiple of rounds"),
    ("interleaved-megatron", 4, 6, 2, "multiple of pp=4"),
    ("dualpipev", 4, 7, 2, "at least 2\\*pp = 8"),
])
def test_unrunnable_microbatch_counts_are_rejected(name: str, pp: int, m: int, vpp: int,
                                                   valid: str) -> None:
    with pytest.raises(ValueError, match=rf"^microbatches={m} is invalid: .*{valid}"):
        build_schedule(name, pp, m, vpp)


def _valid_shapes(max_pp: int, max_m: int):
    for name, chunks in CHUNKS.items():
        for pp in range(1, max_pp + 1):
            for m in range(1, max_m + 1):
                for vpp in chunks:
                    try:
                        yield build_schedule(name, pp, m, vpp)
                    except ValueError:
                        continue


@pytest.mark.slow
def test_every_schedule_is_complete_and_deadlock_free_on_a_grid() -> None:
    count = 0
    for schedule in _valid_shapes(max_pp=8, max_m=16):
        check_schedule(schedule)
        run = execute_unit_costs(schedule, 1, 2, 1)
        assert run.makespan > 0
        count += 1
    assert count > 1000  # the grid really ran (most shapes are valid)


def test_schedule_metadata() -> None:
    schedule = build_schedule("dualpipev", 4, 8, 2)
    assert (schedule.name, schedule.pp, schedule.microbatches, schedule.vpp) == ("dualpipev", 4, 8, 2)
    assert schedule.stage_map == "v" and schedule.split_backward
    assert build_schedule("interleaved", 4, 8, 2).stage_map == "loop"
    assert not build_schedule("1f1b", 4, 8).split_backward


def test_check_schedule_catches_missing_misplaced_and_repeated_actions() -> None:
    good = build_schedule("1f1b", 2, 2)
    orders = [list(o) for o in good.orders]

    def variant(new_orders: list[list[Action]]) -> PipelineSchedule:
        return PipelineSchedule(name="bad", pp=2, microbatches=2, vpp=1,
                                orders=tuple(tuple(o) for o in new_orders))

    with pytest.raises(ValueError, match="missing"):
        check_schedule(variant([orders[0][:-1], orders[1]]))
    with pytest.raises(ValueError, match="missing"):
        check_schedule(variant([orders[0] + [orders[0][0]], orders[1]]))
    with pytest.raises(ValueError, match="lives on rank 1"):
        check_schedule(variant([orders[0] + [orders[1][0]], orders[1][1:]]))
