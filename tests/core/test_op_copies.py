"""The builder's fast op constructors make what the slower general ones make: ``moved_op`` is
``dataclasses.replace`` of lane and kind, ``collective_op`` takes its kind and cost class from
the collective (on a seeded sample of ops with every field set)."""

from __future__ import annotations

import dataclasses
import random

from core.groups import DP, PP, TP
from core.taskgraph import Op, collective_op, moved_op
from core.vocab import Collective, GemmRole, Kind, Lane, OpClass


def _random_op(rng: random.Random) -> Op:
    return Op(rng.choice(list(Lane)), rng.choice(list(Kind)), f"op{rng.randrange(100)}", rng.choice(list(OpClass)),
              flops=rng.random() * 1e12, bytes=rng.random() * 1e9, dim=rng.choice([None, DP, PP, TP]),
              layer=rng.randrange(-1, 90), duration_s=rng.choice([None, rng.random()]), concurrent=rng.random() < 0.5,
              m=rng.randrange(9000), n=rng.randrange(9000), k=rng.randrange(9000), batch=rng.randrange(1, 9),
              rate=rng.random(), chunks=rng.randrange(1, 5), own_chunk=rng.random() < 0.5, beside=rng.randrange(1, 4),
              split=rng.randrange(1, 4), split_streams=rng.randrange(1, 3), causal=rng.random() < 0.5,
              gemm_role=rng.choice([None, *GemmRole]), dtype=rng.choice(["", "bf16", "fp8"]))


def test_moved_op_is_replace_of_lane_and_kind() -> None:
    rng = random.Random(29)
    for _ in range(200):
        op, lane, kind = _random_op(rng), rng.choice(list(Lane)), rng.choice(list(Kind))
        moved, replaced = moved_op(op, lane, kind), dataclasses.replace(op, lane=lane, kind=kind)
        assert moved == replaced and hash(moved) == hash(replaced)
        assert [getattr(moved, f.name) for f in dataclasses.fields(Op)] == \
            [getattr(replaced, f.name) for f in dataclasses.fields(Op)]


def test_collective_op_kind_and_class_are_the_collectives() -> None:
    for c in Collective:
        op = collective_op(Lane.DP, c, "x", bytes=1.0, dim=DP)
        assert op == Op(Lane.DP, Kind(c), "x", OpClass(c), bytes=1.0, dim=DP)
        assert type(op.kind) is Kind and type(op.op_class) is OpClass
