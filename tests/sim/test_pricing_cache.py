"""TaskCoster's caches give every task the cost an uncached pricing gives it: one-op
communication tasks (pipeline sends, each with its own op name) share prices, not segments."""

from __future__ import annotations

import pytest

from sim.cli.job_args import job_from_args
from sim.cli.main import build_parser
from sim.simulate import build_priced


@pytest.mark.parametrize("flags", [[], ["--schedule", "interleaved", "--vpp", "2"], ["--pp", "1", "--zero", "3"],
                                   ["--offload-activations"], ["--full"]])
def test_cached_costs_equal_uncached_and_keep_each_tasks_ops(flags: list[str]) -> None:
    job = job_from_args(build_parser(["simulate"]).parse_args(["simulate", "--microbatches", "4", *flags]))
    priced = build_priced(job)
    for task, cost in zip(priced.graph.tasks, priced.costs, strict=True):
        fresh = priced.coster.layout(task)  # priced op by op, no task cache
        assert cost.duration_s == fresh.duration_s and cost.crosses_nodes == fresh.crosses_nodes
        assert [(s.offset_s, s.duration_s) for s in cost.segments] == [(s.offset_s, s.duration_s) for s in fresh.segments]
        assert all(s.op == op for s, op in zip(cost.segments, task.ops, strict=True))  # its own names
    one_op = [t for t in priced.graph.tasks if len(t.ops) == 1 and t.lane != "compute"]
    assert 0 < len(priced.coster._unnamed) < len(one_op)  # sends, named per micro-batch, priced once per message
