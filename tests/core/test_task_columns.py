"""A task graph's columns (core.task_columns.TaskColumns, TaskGraph.columns) hold each task's own
labels, ops and edges, are made once per graph, cannot be written, and are not pickled with it;
the helpers that code them (first_seen, row_codes, sim.span_arrays.SpanVocab.recode) code as a
task-by-task dictionary would."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from core.task_columns import LANES, NO_GROUP, first_seen, row_codes
from core.taskgraph import TaskGraph
from core.vocab import KINDS
from sim.job import resolve_job
from sim.simulate import build_priced
from sim.span_arrays import SpanVocab

CASES = [  # a Megatron interleaved 3D plan, a torch-runtime FSDP + TP + PP plan (its sends held open)
    {"model": "gpt3-1.7b", "nodes": 2, "tp": 2, "pp": 4, "dp": 2, "global_batch": 16, "schedule": "interleaved",
     "vpp": 2},
    {"model": "llama3-8b", "nodes": 1, "tp": 2, "pp": 2, "dp": 2, "framework": "torch", "zero": 3, "global_batch": 8},
]


@pytest.fixture(scope="module", params=range(len(CASES)))
def graph(request: pytest.FixtureRequest) -> TaskGraph:
    return build_priced(resolve_job(CASES[request.param])).graph


def test_every_column_holds_each_tasks_own_value(graph: TaskGraph) -> None:
    c = graph.columns
    tasks = graph.tasks
    assert len(c) == len(tasks) > 100
    for label in ("rank", "step", "stage", "chunk", "microbatch", "layer", "peer", "ordered"):
        assert getattr(c, label).tolist() == [getattr(t, label) for t in tasks], label
    assert [LANES[i] for i in c.lane] == [t.lane for t in tasks]
    assert [KINDS[i] for i in c.kind] == [t.kind for t in tasks]
    assert [c.names[i] for i in c.name] == [t.name for t in tasks]
    assert [c.groups[i] if i != NO_GROUP else "" for i in c.group] == [t.group for t in tasks]
    assert [c.streams[i] for i in c.stream] == [t.stream for t in tasks]
    assert all(c.works[w] is t.ops for w, t in zip(c.work.tolist(), tasks, strict=True))
    assert [tuple(c.deps.row(i).tolist()) for i in range(len(tasks))] == list(graph.deps)
    pairs = [(i, u) for i, hs in graph.holds.items() for u in hs]
    assert list(zip(c.hold_task.tolist(), c.hold_until.tolist(), strict=True)) == pairs
    assert any(t.peer >= 0 for t in tasks)  # pipeline sends


def test_the_torch_case_has_holds() -> None:
    assert any(build_priced(resolve_job(CASES[1])).graph.holds.values())  # so the hold columns are checked


def test_columns_are_made_once_and_cannot_be_written(graph: TaskGraph) -> None:
    assert graph.columns is graph.columns and graph.columns.kind is graph.columns.kind
    assert np.shares_memory(graph.columns.rank, graph.columns.rank)
    with pytest.raises(ValueError, match="read-only"):
        graph.columns.microbatch[0] = 7
    with pytest.raises(ValueError, match="read-only"):
        graph.columns.deps.index[0] = 0


def test_a_pickled_graph_leaves_its_columns_behind(graph: TaskGraph) -> None:
    _ = graph.columns.rank
    copy = pickle.loads(pickle.dumps(graph))
    assert "columns" not in copy.__dict__ and copy == graph
    assert np.array_equal(copy.columns.layer, graph.columns.layer)


def test_first_seen_numbers_codes_in_order_of_first_appearance() -> None:
    codes, originals = first_seen(np.array([7, 3, 7, -1, 3, 9]))
    assert codes.tolist() == [0, 1, 0, 2, 1, 3] and originals.tolist() == [7, 3, -1, 9]
    empty, none = first_seen(np.zeros(0, np.int64))
    assert empty.size == 0 and none.size == 0


def test_row_codes_are_equal_exactly_for_equal_rows() -> None:
    rng = np.random.default_rng(3)
    cols = [rng.integers(-2, 3, 500), rng.integers(0, 4, 500), rng.integers(-1, 2, 500)]
    codes = row_codes(*cols)
    rows = list(zip(*(c.tolist() for c in cols), strict=True))
    for i in range(0, 500, 7):
        for j in range(0, 500, 11):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j])
    wide = [np.array([0, 2**40, 0]), np.array([0, 2**40, 0]), np.array([1, 1, 1])]  # beyond one int64
    assert row_codes(*wide).tolist() == [0, 1, 0]


def test_recoding_a_column_gives_the_codes_of_a_task_by_task_vocabulary(graph: TaskGraph) -> None:
    c = graph.columns
    one, whole = SpanVocab(), SpanVocab()
    expected = one.codes_of([t.name for t in graph.tasks])
    assert whole.recode(c.name, lambda i: c.names[i]).tolist() == expected and whole.codes == one.codes
    kinds, by_task = SpanVocab(), SpanVocab()
    assert kinds.recode(c.kind, lambda i: KINDS[i]).tolist() == by_task.codes_of([t.kind for t in graph.tasks])
    assert kinds.codes == by_task.codes
