"""The builder hands every task of one kind the same ops tuple (a block's ops made once per build
and tiled over micro-batches and ranks; a pipeline message's op over the ranks that send or
receive it), and the pricer knows a tuple by its identity: the prices are those of pricing each
task on its own, and the Timeline's pipeline spans keep their tasks' names."""

from __future__ import annotations

from core.vocab import Kind, Lane
from sim.job import Job, resolve_job
from sim.pricing import TaskCoster
from sim.simulate import build_priced, make_placement, simulate, task_coster

PIPELINE = {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 1, "tp": 2, "pp": 2, "dp": 2,
            "global_batch": 16, "microbatch_size": 1}


def _job(**over: object) -> Job:
    return resolve_job({**PIPELINE, **over})


def test_equal_block_ops_are_one_tuple() -> None:
    graph = build_priced(_job()).graph
    compute = [t for t in graph.tasks if t.lane == Lane.COMPUTE]
    by_value = {t.ops for t in compute}
    assert len({id(t.ops) for t in compute}) == len(by_value)  # no two equal tuples
    middle = [t for t in compute if 1 <= t.microbatch <= 6]  # neither the first nor the last (gradient reduction)
    assert len(middle) == 6 * len([t for t in middle if t.microbatch == 1])
    assert {id(t.ops) for t in middle} == {id(t.ops) for t in middle if t.microbatch == 1}


def test_full_graph_shares_message_ops_across_ranks() -> None:
    graph = build_priced(_job(full=True)).graph
    sends = [t for t in graph.tasks if t.kind == Kind.SEND and t.lane == Lane.PP]
    same: dict[tuple[object, ...], set[int]] = {}
    for t in sends:
        same.setdefault((t.stage, t.microbatch, t.ops), set()).add(id(t.ops))
    assert len({t.rank for t in sends}) == 8  # every rank sends (stage 0 activations, stage 1 gradients)
    assert all(len(ids) == 1 for ids in same.values())


def test_identity_prices_equal_prices_one_by_one() -> None:
    job = _job(full=True)
    priced = build_priced(job)
    fresh = task_coster(job, make_placement(job))
    assert isinstance(fresh, TaskCoster)
    assert [fresh.layout(t) for t in priced.graph.tasks] == priced.costs


def test_pipeline_spans_keep_their_task_names() -> None:
    spans = simulate(_job()).timeline.spans
    sends = spans[spans["kind"] == "send"]
    assert len(sends) == 2 * 8  # stage 0's activations, stage 1's gradients, per micro-batch
    assert sorted(sends["name"]) == sorted([f"act F{m}" for m in range(8)] + [f"grad B{m}" for m in range(8)])
    assert (sends["layer"] == -1).all()
