"""Why a step falls back: the ranks of a shorter step advancing at different paces.

GPT-3 18B, TP8 PP4 DP8 with ZeRO-3 on 32 DGX A100: every stage's data-parallel stream gathers its
layers' parameters for every micro-batch, and the first stage's also the embedding's, so the first
stage runs a little slower per micro-batch than the others, which keep their own pace until their
slack runs out; no shorter step shows one period. :func:`sim.steady_state.rank_paces` must give
each rank's pace as its compute tasks' starts show it, and the fallback must say so."""

from __future__ import annotations

import numpy as np
import pytest

from core.vocab import Lane
from sim.job import resolve_job
from sim.simulate import build_priced, simulate, timed
from sim.steady_state import SHIFT_TOLERANCE, rank_paces

SETTINGS = {"model": "gpt3-18b", "cluster": "dgx-a100", "nodes": 32, "tp": 8, "pp": 4, "dp": 8, "microbatch_size": 1,
            "zero": 3, "sequence_parallel": True}


@pytest.fixture(scope="module")
def short_step():
    job = resolve_job({**SETTINGS, "global_batch": 36 * 8})
    priced = build_priced(job)
    start, end = timed(job, priced, "list")
    return priced.graph, start, end


def test_paces_are_the_ranks_compute_steps(short_step) -> None:
    graph, start, end = short_step
    paces = rank_paces(graph, start, end, 36, 4, 1)
    assert paces is not None
    slowest, fastest = paces
    tol = SHIFT_TOLERANCE * float(end.max() - start.min())
    assert slowest - fastest > tol
    per_rank = {}
    for rank in sorted({t.rank for t in graph.tasks}):  # the first compute task of each mid micro-batch
        firsts = [min(start[i] for i, t in enumerate(graph.tasks)
                      if t.rank == rank and t.lane == Lane.COMPUTE and t.microbatch == k) for k in range(4, 32)]
        per_rank[rank] = float(np.median(np.diff(firsts)))
    assert max(per_rank.values()) == pytest.approx(slowest, abs=tol)
    assert min(per_rank.values()) == pytest.approx(fastest, abs=tol)


@pytest.mark.slow
def test_the_fallback_names_the_paces() -> None:
    reason = simulate(resolve_job({**SETTINGS, "global_batch": 1024})).steady_fallback
    assert "its ranks advanced at different paces" in reason and "s per micro-batch" in reason
