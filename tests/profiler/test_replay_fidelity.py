"""Unchanged replay reproduces each rank's measured step time (within 3%) on the committed
traces and, when ../shared is present, on the external GPU runs; the critical path of a step
adds up to the step time; partial matching is reported."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from profiler.replay import ReplayResult, critical_path, replay_run
from profiler.replay.critical_path import CATEGORIES

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces-external"
COMMITTED = ("tp2pp2dp2-interleaved", "dp4-zero3", "pp2-zbv")
EXTERNAL = ("dlrm-8rank-v100", "hta-sampled-2rank-of-128")
TOLERANCE = 0.03


@cache
def replayed(path: str) -> ReplayResult:
    return replay_run(path)


def run_paths() -> list[object]:
    paths: list[object] = [pytest.param(str(REPO / "traces" / name), id=name) for name in COMMITTED]
    skip = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces-external is absent")
    paths += [pytest.param(str(SHARED / name), id=name, marks=skip) for name in EXTERNAL]
    return paths


@pytest.mark.parametrize("path", run_paths())
@pytest.mark.slow
def test_unchanged_replay_reproduces_every_rank_step_time(path: str) -> None:
    result = replayed(path)
    ranks = result.ranks
    assert len(ranks) == len(result.parsed.timeline.ranks) * len(set(ranks["step"]))
    assert ranks["replayed_s"].notna().all()
    measured = result.parsed.steps[result.parsed.steps["kept"]].set_index(["rank", "step"])["dur_s"]
    for row in ranks.itertuples():
        assert row.measured_s == pytest.approx(measured[(row.rank, row.step)], rel=1e-9)
        assert abs(row.replayed_s / row.measured_s - 1.0) < TOLERANCE, (row.rank, row.step)


@pytest.mark.parametrize("path", run_paths())
@pytest.mark.slow
def test_unchanged_replay_puts_device_work_where_it_was(path: str) -> None:
    """Every replayed span starts where it started in the trace (the model is built so); only
    asynchronous gloo p2p spans may end earlier (their ranges stay open until ``wait()``)."""
    result = replayed(path)
    a = result.model.measured["timeline"].spans
    b = result.base.timeline.spans  # row i is row i of the measured Timeline
    assert len(a) == len(b) and (a["name"].to_numpy() == b["name"].to_numpy()).all()
    assert np.allclose(a["start_s"], b["start_s"], atol=1e-7)
    gloo_work = (result.parsed.raw["source"] == "gloo_work").to_numpy()
    p2p = a["kind"].isin(["send", "recv"]).to_numpy() & gloo_work
    assert np.allclose(a["end_s"][~p2p], b["end_s"][~p2p], atol=1e-7)
    assert (b["end_s"][p2p] <= a["end_s"][p2p] + 1e-7).all()


@pytest.mark.parametrize("path", run_paths())
@pytest.mark.slow
def test_critical_path_adds_up_to_the_step_time(path: str) -> None:
    result = replayed(path)
    cp = critical_path(result.model, result.base)
    slowest = result.base.windows["step_time_s"].max()
    assert cp.step_time_s == pytest.approx(slowest, rel=1e-12)
    assert set(cp.shares) == set(CATEGORIES)
    assert all(v >= 0 for v in cp.shares.values())
    assert sum(cp.shares.values()) == pytest.approx(1.0, abs=1e-9)
    seg = cp.segments
    gaps = seg["start_s"].to_numpy()[1:] - seg["end_s"].to_numpy()[:-1]
    assert np.abs(gaps).max(initial=0.0) < 1e-9  # one gap-free chain
    assert float((seg["end_s"] - seg["start_s"]).sum()) == pytest.approx(cp.step_time_s, rel=1e-9)


@pytest.mark.slow
def test_collective_transfer_is_the_last_arrivals_duration() -> None:
    """For every matched collective, the replayed transfer begins when the last member arrives,
    and that member's transfer lasts its whole measured duration."""
    result = replayed(str(REPO / "traces" / "dp4-zero3"))
    model = result.model
    t, e = model.items["start_s"].to_numpy(), model.items["end_s"].to_numpy()
    assert model.matching.collectives
    for ids in model.matching.collectives.values():
        last = max(ids, key=lambda i: t[i])
        assert model.dur_s[last] == pytest.approx(e[last] - t[last], abs=1e-12)
        for i in ids:
            assert model.dur_s[i] == pytest.approx(max(0.0, e[i] - t[last]), abs=1e-12)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces-external is absent")
@pytest.mark.slow
def test_sampled_run_reports_what_it_could_not_match() -> None:
    result = replayed(str(SHARED / "hta-sampled-2rank-of-128"))
    m = result.summary()["matching"]
    assert m["unmatched_spans"] > 0 and m["matched_fraction"] < 1.0
    assert m["collectives_by_time"] >= 1  # sequence numbers shifted by sampling are repaired
    text = " ".join(result.notes)
    assert "found no peer" in text and "2 of 128 ranks traced" in text
