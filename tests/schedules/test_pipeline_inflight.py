"""Peak in-flight micro-batches (activations held) per rank against the published counts.

Units are chunk activations (one chunk = 1/vpp of a rank's layers).
- GPipe holds all m micro-batches on every stage (Huang et al. 2019).
- 1F1B holds at most p - rank (Narayanan et al. 2021, PipeDream-Flush).
- Interleaved 1F1B holds warm-up + 1 chunks, warm-up = (v-1)*g + 2(p-1-rank) (Megatron-LM), i.e.
  the first rank holds p * (1 + (p-1)/(p*v)) stage-equivalents (Korthikanti et al. 2022, "Reducing Activation Recomputation", interleaved-schedule memory).
- ZB-V holds 2p chunks = 1F1B's p stage-equivalents on every rank (Qi et al. 2024, sec. 6).
- DualPipeV holds PP+1 chunks with PP = 2p stages (DualPipe README, "Activation Per Device").
"""

from __future__ import annotations

import pytest

from schedules.pipeline import build_schedule, peak_inflight


def test_gpipe_holds_every_microbatch() -> None:
    for pp in range(1, 9):
        for m in (1, 3, pp, 2 * pp + 1, 32):
            assert peak_inflight(build_schedule("gpipe", pp, m)) == [m] * pp


def test_1f1b_holds_p_minus_rank() -> None:
    for pp in range(1, 17):
        for m in (1, 2, pp, pp + 1, 4 * pp):
            assert peak_inflight(build_schedule("1f1b", pp, m)) == [min(pp - r, m) for r in range(pp)]


def test_interleaved_holds_megatron_warmup_plus_one() -> None:
    for vpp in (2, 3, 4):
        for pp in range(1, 9):
            for m in range(pp, 5 * pp + 1, pp):
                peaks = peak_inflight(build_schedule("interleaved", pp, m, vpp))
                warmup = [(vpp - 1) * pp + 2 * (pp - 1 - r) for r in range(pp)]
                assert peaks == [min(w + 1, vpp * m) for w in warmup], (pp, m, vpp)
                if m > pp:   # first rank, in whole-stage activations
                    assert peaks[0] / vpp == pytest.approx(pp * (1 + (pp - 1) / (pp * vpp)))


def test_megatron_variant_runs_all_forwards_first_when_m_equals_p() -> None:
    for vpp in (2, 3):
        for pp in range(2, 9):
            megatron = build_schedule("interleaved-megatron", pp, pp, vpp)
            assert peak_inflight(megatron) == [vpp * pp] * pp
            for order in megatron.orders:
                phases = [a.phase for a in order]
                assert phases == ["F"] * (vpp * pp) + ["B"] * (vpp * pp)
            # otherwise it is the torch order
            for m in (2 * pp, 3 * pp):
                assert (build_schedule("interleaved-megatron", pp, m, vpp).orders
                        == build_schedule("interleaved", pp, m, vpp).orders)


def test_interleaved_zero_bubble_holds_vp_awaiting_w_on_every_rank() -> None:
    for vpp in (1, 2, 3):
        for pp in range(1, 9):
            for m in (pp, 2 * pp, 4 * pp):
                schedule = build_schedule("interleaved-zb", pp, m, vpp)
                assert peak_inflight(schedule) == [vpp * pp - r for r in range(pp)]
                assert peak_inflight(schedule, release="W") == [vpp * pp] * pp


def test_zbv_holds_1f1b_first_stage_memory_on_every_rank() -> None:
    for pp in range(1, 9):
        for m in range(1, 4 * pp + 1):
            peaks = peak_inflight(build_schedule("zbv", pp, m, 2), release="W")
            if m >= 2 * pp - 1:
                assert peaks == [2 * pp] * pp
            assert max(peaks) <= 2 * pp


def test_dualpipev_holds_pp_stages_plus_one() -> None:
    for pp in range(1, 9):
        for m in range(2 * pp, 5 * pp + 1):
            schedule = build_schedule("dualpipev", pp, m, 2)
            assert peak_inflight(schedule) == [2 * pp + 1] * pp
            assert peak_inflight(schedule, release="W") == [2 * pp + 1] * pp


def test_release_is_validated() -> None:
    with pytest.raises(ValueError, match=r"^release='X' is invalid: expected one of B, W$"):
        peak_inflight(build_schedule("zb-h1", 2, 4), release="X")
    with pytest.raises(ValueError, match=r"^release='W' is invalid: schedule 1f1b has no W"):
        peak_inflight(build_schedule("1f1b", 2, 4), release="W")
