"""core.slot_init: the faster __init__ of Task and Op makes the instance the dataclass's own would."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from core.groups import DP, PP
from core.slot_init import slot_init
from core.taskgraph import Op, Task, _op_fields
from core.vocab import Kind, Lane, OpClass


def _dataclass_made(cls: type, **values: Any) -> Any:
    """What dataclasses' frozen __init__ does: every init field (its default when not given) set
    with object.__setattr__, then __post_init__."""
    obj: Any = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            object.__setattr__(obj, f.name, values.get(f.name, f.default))
    if hasattr(cls, "__post_init__"):
        obj.__post_init__()
    return obj


def _slots(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


@pytest.mark.parametrize("seed", range(20))
def test_task_and_op_are_the_dataclass_instances(seed: int) -> None:
    rng = random.Random(seed)
    op_values: dict[str, Any] = {"lane": rng.choice(list(Lane)), "kind": rng.choice(list(Kind)), "name": f"op{rng.random()}",
                 "op_class": rng.choice(list(OpClass)), "bytes": rng.random() * 1e9, "dim": rng.choice([None, DP, PP]),
                 "layer": rng.randrange(-1, 96), "concurrent": rng.random() < 0.5, "m": rng.randrange(4096)}
    op = Op(**op_values)
    expected_op = _dataclass_made(Op, **op_values)
    assert _slots(op) == _slots(expected_op) and op.hash_ == expected_op.hash_ == hash(_op_fields(op))
    task_values: dict[str, Any] = {"rank": rng.randrange(1024), "lane": rng.choice(list(Lane)), "kind": rng.choice(list(Kind)),
                   "name": "t", "ops": (op,), "microbatch": rng.randrange(64), "peer": rng.randrange(-1, 8),
                   "ordered": rng.random() < 0.5, "group": rng.choice(["", "g/1"])}
    task = Task(**task_values)
    assert _slots(task) == _slots(_dataclass_made(Task, **task_values))
    assert task == _dataclass_made(Task, **task_values) and dataclasses.replace(task, rank=7).rank == 7


def test_instances_stay_frozen_and_arguments_are_checked() -> None:
    task = Task(0, Lane.COMPUTE, Kind.FWD, "f", ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.rank = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        Task(0, Lane.COMPUTE, Kind.FWD, "f")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Task(0, Lane.COMPUTE, Kind.FWD, "f", (), nonsense=1)  # type: ignore[call-arg]


def test_classes_it_cannot_set_are_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        x: list[int] = dataclasses.field(default_factory=list)

    for cls in (NoSlots, Factory):
        with pytest.raises(TypeError, match="slot_init"):
            slot_init(cls)


def test_the_builders_records_and_actions_are_the_dataclass_instances() -> None:
    from schedules.actions import Action
    from schedules.passes.program import Coords, Edge, Emit

    task = Task(0, Lane.COMPUTE, Kind.FWD, "f", ())
    cases: list[tuple[type, dict[str, Any]]] = [
        (Action, {"stage": 3, "phase": "B", "microbatch": 7}), (Coords, {"tp": 1, "cp": 0, "dp": 2, "pp": 3}),
        (Emit, {"point": (1, 2, 3, 0), "task": task}), (Edge, {"point": (0, 0, 0, 0), "target": ("a",), "source": ("b",)})]
    for cls, values in cases:
        made = cls(**values)
        assert _slots(made) == _slots(_dataclass_made(cls, **values)) and made == _dataclass_made(cls, **values)
