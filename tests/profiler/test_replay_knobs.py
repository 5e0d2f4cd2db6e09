"""What-if knob semantics on the committed traces: homogeneity (scaling every duration by F scales
every step by exactly F), a rank scaled by 0 has no compute left, faster links and dropped work
never slow a step, a slower rank holds up the ranks it synchronises with, and bad knobs are
rejected with one line naming what is wrong."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from profiler.kineto import load_run
from profiler.kineto.parsed import ParsedRun
from profiler.replay import WhatIf, parse_link, parse_scale, replay_parsed
from profiler.replay.api import ReplayResult

REPO = Path(__file__).resolve().parents[2]
TP2PP2DP2 = str(REPO / "traces" / "tp2pp2dp2-interleaved")
DP4 = str(REPO / "traces" / "dp4-zero3")
PP2 = str(REPO / "traces" / "pp2-zbv")
EPS = 1e-9


@cache
def parsed(path: str) -> ParsedRun:
    return load_run(path)


def whatif(path: str, **knobs: object) -> ReplayResult:
    return replay_parsed(path, parsed(path), WhatIf(**knobs))  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [PP2, DP4])
@pytest.mark.parametrize("factor", [0.5, 3.0])
@pytest.mark.slow
def test_scaling_every_duration_scales_every_step_exactly(path: str, factor: float) -> None:
    """The replay is a max-plus system: all work, host time, lags and transfers times F gives
    every start and end times F (closed form)."""
    targets = ("compute", "host", "waiting", "comm")
    res = whatif(path, scale=tuple((t, factor) for t in targets))
    ratio = res.ranks["whatif_s"] / res.ranks["replayed_s"]
    assert np.allclose(ratio, factor, rtol=1e-9)


@pytest.mark.slow
def test_a_rank_scaled_by_zero_has_no_compute_left() -> None:
    """Its ops take no time; the only ones still drawn with a length are those that wait inside
    for a collective (FSDP's copy-out after an all-gather)."""
    res = whatif(DP4, scale=(("rank2", 0.0),))
    assert res.changed is not None
    items, model = res.model.items, res.model
    mine = (items["rank"] == 2).to_numpy() & (items["role"] == "compute").to_numpy()
    assert mine.sum() > 100
    assert (res.changed.params.dur_s[mine] == 0).all() and (res.changed.params.pre_s[mine] == 0).all()
    spans = res.changed.timeline.spans
    rows = items["row"].to_numpy()[mine & (model.kind != "wait")]
    assert len(rows) > 100 and ((spans["end_s"].to_numpy()[rows] - spans["start_s"].to_numpy()[rows]) == 0).all()
    others = (items["rank"] != 2).to_numpy() & (items["role"] == "compute").to_numpy()
    assert (res.changed.params.dur_s[others] > 0).any()
    assert (res.ranks["whatif_s"] <= res.ranks["replayed_s"] + EPS).all()


@pytest.mark.parametrize("dim", ["tp", "pp", "dp"])
@pytest.mark.slow
def test_doubling_a_dims_bandwidth_never_slows_a_step(dim: str) -> None:
    res = whatif(TP2PP2DP2, link=(parse_link(f"{dim}:bandwidth=2x"),))
    assert (res.ranks["whatif_s"] <= res.ranks["replayed_s"] + EPS).all()
    slower = whatif(TP2PP2DP2, link=(parse_link(f"{dim}:latency=3x"),))
    assert (slower.ranks["whatif_s"] >= slower.ranks["replayed_s"] - EPS).all()


@pytest.mark.parametrize("target", ["optimizer", "comm", "comm.tp", "dp", "host", "bwd", "gemm"])
@pytest.mark.slow
def test_dropping_work_never_slows_a_step(target: str) -> None:
    res = whatif(TP2PP2DP2, drop=(target,))
    assert (res.ranks["whatif_s"] <= res.ranks["replayed_s"] + EPS).all()
    assert (res.ranks["whatif_s"] < res.ranks["replayed_s"] - EPS).any()


@pytest.mark.slow
def test_dropped_optimizer_spans_take_no_time() -> None:
    res = whatif(DP4, drop=("optimizer",))
    assert res.changed is not None
    spans = res.changed.timeline.spans
    opt = spans[(spans["kind"].astype(str) == "optimizer") & (spans["lane"].astype(str) == "compute")]
    assert len(opt) > 0 and ((opt["end_s"] - opt["start_s"]).abs() < 1e-12).all()


@pytest.mark.slow
def test_a_slow_rank_holds_up_its_collective_peers() -> None:
    """ZeRO-3: every all-gather and reduce-scatter waits for the slowest member, so slowing rank 0's
    compute makes every rank's step longer."""
    res = whatif(DP4, scale=(("rank0", 3.0),))
    assert (res.ranks["whatif_s"] > res.ranks["replayed_s"] * 1.05).all()


@pytest.mark.slow
def test_removing_a_straggler_never_slows_and_names_the_rank() -> None:
    res = whatif(DP4, remove_straggler="auto")
    assert (res.ranks["whatif_s"] <= res.ranks["replayed_s"] + EPS).all()
    assert any("--remove-straggler: rank" in n for n in res.notes)


@pytest.mark.slow
def test_comm_scaled_by_factor_scales_matched_transfers() -> None:
    res = whatif(DP4, scale=(("comm", 2.0),))
    assert res.changed is not None
    model = res.model
    transfers = np.flatnonzero(model.kind == "collective")
    assert transfers.size and np.allclose(res.changed.params.dur_s[transfers], 2.0 * model.dur_s[transfers])


@pytest.mark.parametrize(("text", "words"), [
    ("gpu=2", ["unknown target 'gpu'", "compute"]),
    ("compute", ["expected TARGET=FACTOR"]),
    ("compute=fast", ["factor 'fast' is invalid"]),
    ("rank1.nothing=2", ["unknown target", "rank<R>"]),
    ("compute=-1", ["factor '-1' is invalid"]),
])
def test_bad_scale_knobs_fail_with_one_line(text: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        parse_scale(text)
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


@pytest.mark.parametrize(("text", "word"), [
    ("dp:speed=2x", "unknown parameter 'speed'"), ("nvlink:bandwidth=2x", "unknown target 'nvlink'"),
    ("dp=2", "expected TARGET:bandwidth=FACTOR"), ("dp:bandwidth=0", "expected > 0"),
])
def test_bad_link_knobs_fail_with_one_line(text: str, word: str) -> None:
    with pytest.raises(ValueError, match=word.replace("(", r"\(")) as err:
        parse_link(text)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_knobs_naming_absent_ranks_or_work_fail_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"rank 9 is not in the trace \(ranks: 0, 1, 2, 3\)"):
        whatif(DP4, scale=(("rank9", 2.0),))
    with pytest.raises(ValueError, match="memcpy: selects no work"):
        whatif(DP4, scale=(("memcpy", 2.0),))
