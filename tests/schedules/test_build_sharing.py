"""What the task-graph builder makes once per build and hands to every task that needs it: a
pipeline message's op (one per label, every stage's), a block's DP reduction and ZeRO-3 gathers
(one ops tuple per stage and layers, every micro-batch's), and the layer blocks of a pass."""

from __future__ import annotations

from collections import defaultdict

from core.taskgraph import Task
from core.vocab import Kind, Lane
from schedules.actions import Action
from schedules.builder import build_task_graph
from schedules.model import ModelSpec
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.work import model_work

MODEL = ModelSpec(num_layers=8, hidden_size=1024, num_heads=16, vocab_size=50257, seq_len=1024)


def _graph(plan: ParallelPlan) -> tuple[Task, ...]:
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return build_task_graph(MODEL, plan, schedule, lambda tp, cp, dp, pp: pp).tasks


def test_every_stages_message_of_one_label_is_one_op_equal_to_the_works() -> None:
    plan = ParallelPlan(pp=4, dp=1, global_batch=8)
    sends = [t for t in _graph(plan) if t.kind == Kind.SEND]
    by_name: dict[str, set[int]] = defaultdict(set)
    stages: dict[str, set[int]] = defaultdict(set)
    for t in sends:
        by_name[t.name].add(id(t.ops))
        stages[t.name].add(t.stage)
    assert len(sends) == 2 * 3 * 8  # activations and gradients across 3 stage boundaries, 8 micro-batches
    assert all(len(ids) == 1 for ids in by_name.values())
    assert all(len(s) == 3 for s in stages.values())  # shared by the three stages that send it
    work = model_work(MODEL, plan, False)
    t = next(t for t in sends if t.name == "act F3")
    assert t.ops == (work.send_op(Action(stage=t.stage, phase="F", microbatch=3), "act F3"),)


def test_a_blocks_dp_collectives_are_one_ops_tuple_for_every_microbatch() -> None:
    plan = ParallelPlan(pp=2, dp=4, global_batch=16, zero=3)
    dp_tasks = [t for t in _graph(plan) if t.lane == Lane.DP and t.microbatch >= 0]
    by_label: dict[tuple[str, int], set[int]] = defaultdict(set)
    microbatches: dict[tuple[str, int], set[int]] = defaultdict(set)
    for t in dp_tasks:
        by_label[(t.name, t.stage)].add(id(t.ops))
        microbatches[(t.name, t.stage)].add(t.microbatch)
        assert t.kind == t.ops[0].kind and t.ops[0].name == t.name
    assert {t.kind for t in dp_tasks} == {Kind.ALL_GATHER, Kind.REDUCE_SCATTER}
    assert all(len(ids) == 1 for ids in by_label.values())
    assert max(len(m) for m in microbatches.values()) == plan.num_microbatches
