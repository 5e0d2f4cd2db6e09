"""per_rank_breakdown on the real external traces vs Holistic Trace Analysis (an independent tool).

Expected values are HTA 0.5.0's own output (PyPI ``HolisticTraceAnalysis``), produced in a
throwaway venv — HTA is not a dependency of trainsim:

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0
    /tmp/hta-venv/bin/python - DIR [last] <<'EOF'
    import sys
    from hta.trace_analysis import TraceAnalysis
    ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=sys.argv[2:] == ["last"])
    tb = ta.get_temporal_breakdown(visualize=False)  # idle/compute/non_compute/kernel_time (us)
    ov = ta.get_comm_comp_overlap(visualize=False)   # comp_comm_overlap_pctg, rounded to 0.01
    print(tb.merge(ov, on="rank").to_string())
    EOF

with DIR = ../shared/traces-external/<run>. HTA's kernel_time is our span_s; its idle, compute and
non-compute times are our fractions times span_s; its overlap percentage is rounded to 2
decimals, so that comparison allows 0.005 percentage points.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiler.hta_metrics import per_rank_breakdown
from profiler.kineto import load_run

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces-external"
DLRM = SHARED / "dlrm-8rank-v100"
SAMPLED = SHARED / "hta-sampled-2rank-of-128"

# rank: (idle_us, compute_us, non_compute_us, kernel_time_us, overlap_pct) from HTA 0.5.0
HTA_DLRM = {
    0: (6419, 1034, 5556, 13009, 4.50), 1: (6428, 1246, 11075, 18749, 2.47),
    2: (7046, 1068, 3236, 11350, 7.88), 3: (8145, 1240, 9468, 18853, 3.31),
    4: (8887, 1126, 6576, 16589, 0.56), 5: (9121, 1041, 6230, 16392, 0.64),
    6: (7051, 1051, 3308, 11410, 7.56), 7: (8308, 1059, 1600, 10967, 9.51),
}
HTA_SAMPLED = {0: (321378, 106252, 172428, 600058, 11.81), 1: (328671, 135548, 136455, 600674, 20.05)}
HTA_SAMPLED_LAST = {0: (675191, 210320, 337336, 1222847, 14.95), 1: (651136, 271973, 308077, 1231186, 19.93)}

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces-external absent")


def _check(directory: Path, expected: dict, all_steps: bool = False) -> None:
    out = per_rank_breakdown(load_run(directory, all_steps=all_steps)).set_index("rank")
    assert sorted(out.index) == sorted(expected)
    for rank, (idle, compute, non_compute, span, overlap_pct) in expected.items():
        row = out.loc[rank]
        span_us = row["span_s"] * 1e6
        assert span_us == pytest.approx(span, abs=1e-3)
        assert row["idle_fraction"] * span_us == pytest.approx(idle, abs=1e-3)
        assert row["compute_fraction"] * span_us == pytest.approx(compute, abs=1e-3)
        assert row["non_compute_fraction"] * span_us == pytest.approx(non_compute, abs=1e-3)
        assert 100 * row["comm_overlap_fraction"] == pytest.approx(overlap_pct, abs=0.005 + 1e-9)


@needs_shared
def test_dlrm_matches_hta() -> None:
    _check(DLRM, HTA_DLRM)  # one profiler step: everything kept, as HTA does


@needs_shared
def test_sampled_matches_hta_dropping_the_last_step() -> None:
    _check(SAMPLED, HTA_SAMPLED)


@needs_shared
def test_sampled_matches_hta_with_all_steps() -> None:
    _check(SAMPLED, HTA_SAMPLED_LAST, all_steps=True)


def _nccl_union_us(path: Path, before_last_step: bool) -> float:
    """Union of NCCL kernel time, computed naively with the stdlib (independent of the parser)."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    last = max(e["ts"] for e in events if e["name"].startswith("ProfilerStep#"))
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "kernel" and e["name"].startswith("nccl")
                   and (not before_last_step or launches.get(e["args"]["correlation"], last) < last))
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


@needs_shared
@pytest.mark.parametrize("directory", [pytest.param(DLRM, marks=pytest.mark.slow), SAMPLED], ids=["dlrm", "sampled"])
def test_comm_time_matches_a_naive_union(directory: Path) -> None:
    run = load_run(directory)
    out = per_rank_breakdown(run).set_index("rank")
    for rank, path in run.files.items():
        expected = _nccl_union_us(path, before_last_step=directory == SAMPLED)
        assert out.loc[rank, "comm_s"] * 1e6 == pytest.approx(expected, abs=1e-3)


@needs_shared
def test_external_runs_meta() -> None:
    dlrm = load_run(DLRM).timeline.meta
    assert dlrm.ranks == tuple(range(8)) and dlrm.world_size == 8
    assert dlrm.devices["3"] == "Tesla V100-SXM2-32GB (device 3)"
    assert dlrm.skipped_events == {"Trace": 8}  # the whole-trace span of each file
    sampled = load_run(SAMPLED).timeline.meta
    assert sampled.profiler_steps_kept == (551,) and sampled.profiler_steps_dropped == (552,)
    assert any("missing 126 rank(s): 2-127" in w for w in sampled.warnings)
