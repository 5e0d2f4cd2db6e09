"""Stragglers as an expected value (--jitter-cv): E[max of n normals], the delay a collective
waits for its slowest rank, its reset when a collective re-aligns the ranks, folded = full."""

from __future__ import annotations

import json
import math

import pytest

from core.groups import DP
from core.taskgraph import Op, Task, TaskGraphBuilder
from core.vocab import Kind, Lane, OpClass
from sim.cli.main import main
from sim.costing import cost_fixed
from sim.engine import Engine
from sim.job import resolve_job
from sim.simulate import simulate
from sim.stragglers import expected_max_normal, straggler_delay_s


def test_expected_maximum_of_normals_closed_forms() -> None:
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-9)
    assert expected_max_normal(5) == pytest.approx(1.162964, rel=1e-6)  # tabulated value
    values = [expected_max_normal(n) for n in (2, 4, 8, 64, 1024)]
    assert values == sorted(values)
    assert all(v < math.sqrt(2 * math.log(n)) for v, n in zip(values, (2, 4, 8, 64, 1024), strict=True))
    with pytest.raises(ValueError, match="n=0 is invalid"):
        expected_max_normal(0)


def test_delay_is_off_for_one_rank_no_jitter_or_no_compute() -> None:
    assert straggler_delay_s(0.0, 1.0, 8) == straggler_delay_s(0.1, 0.0, 8) == straggler_delay_s(0.1, 1.0, 1) == 0.0
    assert straggler_delay_s(0.1, 2.0, 2) == pytest.approx(0.2 / math.sqrt(math.pi))


def _compute(rank: int, seconds: float, name: str = "c") -> Task:
    return Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.FWD, name=name,
                ops=(Op(Lane.COMPUTE, Kind.FWD, name, OpClass.FIXED, duration_s=seconds),))


def _collective(rank: int, seconds: float, group: str = "") -> Task:
    return Task(rank=rank, lane=Lane.DP, kind=Kind.ALL_REDUCE, name="ar", group=group,
                ops=(Op(Lane.DP, Kind.ALL_REDUCE, "ar", OpClass.FIXED, duration_s=seconds, dim=DP),))


def _ends(builder: TaskGraphBuilder, cv: float, sizes: dict[int, int]) -> list[float]:
    graph = builder.build()
    return list(Engine(graph, cost_fixed(graph), jitter_cv=cv, sync_sizes=sizes).run().end_s)


def test_a_collective_waits_for_its_expected_slowest_rank() -> None:
    """Two ranks compute T, then all-reduce for D: it ends at T + cv T E[max of 2] + D; a folded
    rank standing for 8 (no group in the graph) waits cv T E[max of 8]."""
    T, D, cv = 1.0, 0.1, 0.05
    g = TaskGraphBuilder()
    c0, c1 = g.add(_compute(0, T)), g.add(_compute(1, T))
    a0, a1 = g.add(_collective(0, D, "g"), [c0]), g.add(_collective(1, D, "g"), [c1])
    ends = _ends(g, cv, {a0: 2, a1: 2})
    assert ends[a0] == ends[a1] == pytest.approx(T + cv * T * expected_max_normal(2) + D)
    assert _ends(g, 0.0, {a0: 2, a1: 2})[a0] == pytest.approx(T + D)
    folded = TaskGraphBuilder()
    c = folded.add(_compute(0, T))
    a = folded.add(_collective(0, D), [c])
    assert _ends(folded, cv, {a: 8})[a] == pytest.approx(T + cv * T * expected_max_normal(8) + D)


def test_a_busy_stream_absorbs_the_lateness() -> None:
    """The comm stream is still busy with an earlier 0.5 s transfer when the data is ready at
    T = 0.2: the slowest rank's 0.01 s lateness is hidden, the all-reduce starts at 0.5."""
    g = TaskGraphBuilder()
    g.add(_collective(0, 0.5))  # not a synchronising task here (no size given)
    c = g.add(_compute(0, 0.2))
    a = g.add(_collective(0, 0.1), [c])
    cv = 0.01 / (0.2 * expected_max_normal(4))
    assert _ends(g, cv, {a: 4})[a] == pytest.approx(0.6)


def test_waiting_on_a_collective_realigns_the_ranks() -> None:
    """compute 1 s -> all-reduce -> compute 0.5 s (after it) -> all-reduce: the second one's
    lateness counts only the 0.5 s since the first re-aligned the ranks."""
    cv, e = 0.1, expected_max_normal(2)
    g = TaskGraphBuilder()
    c1 = g.add(_compute(0, 1.0))
    a1 = g.add(_collective(0, 0.0), [c1])
    c2 = g.add(_compute(0, 0.5, "c2"), [a1])
    a2 = g.add(_collective(0, 0.0), [c2])
    ends = _ends(g, cv, {a1: 2, a2: 2})
    assert ends[a1] == pytest.approx(1.0 + cv * 1.0 * e)
    assert ends[a2] == pytest.approx(ends[a1] + 0.5 + cv * 0.5 * e)


def _step(**settings: object) -> float:
    return simulate(resolve_job(settings)).metrics.step_time_s


def test_folded_equals_full_and_jitter_never_speeds_a_step_up() -> None:
    base = _step()
    steps = [_step(jitter_cv=cv) for cv in (0.0, 0.01, 0.05)]
    assert steps[0] == base and steps == sorted(steps) and steps[2] > base
    assert _step(jitter_cv=0.05, full=True) == pytest.approx(steps[2], rel=1e-9)


def test_bad_jitter_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--jitter-cv", "1.5", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["trainsim simulate: error: jitter_cv=1.5 is invalid: expected a number in [0, 1)"]


def test_job_file_sets_jitter_and_summary_says_so(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.toml").write_text("[sim]\njitter_cv = 0.02\n")
    assert main(["simulate", "--config", "job.toml", "--json", "--no-report"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["simulation"]["jitter_cv"] == 0.02
    assert any("stragglers as an expected value" in a for a in summary["simulation"]["approximations"])
