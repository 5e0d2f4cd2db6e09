"""An FP8 plan simulated: its quantized GEMMs run at the FP8 rate, everything else (attention,
norms, the logits) at the BF16 rate of the same plan in BF16, and the quantization kernels appear
on the timeline; MFU is reported against both peaks."""

from __future__ import annotations

import pytest

from sim.job import resolve_job
from sim.simulate import simulate
from sim.summary import summarize

SETTINGS = {"model": "llama3-8b", "tp": 2, "pp": 1, "dp": 4, "nodes": 1, "microbatches": 2, "layers": 2}


def _spans(dtype: str):  # type: ignore[no-untyped-def]
    result = simulate(resolve_job({**SETTINGS, "dtype": dtype}))
    spans = result.timeline.spans
    return result, spans[spans["lane"] == "compute"].assign(dur=lambda s: s["end_s"] - s["start_s"])


def _duration(spans, name: str) -> float:  # type: ignore[no-untyped-def]
    return float(spans[spans["name"] == name]["dur"].iloc[0])


def test_fp8_plan_prices_only_the_quantized_gemms_at_the_fp8_rate() -> None:
    _, bf16 = _spans("bf16")
    result, fp8 = _spans("fp8")
    assert _duration(fp8, "L1.attn") == pytest.approx(_duration(bf16, "L1.attn"), rel=1e-12)
    assert _duration(fp8, "head.logits") == pytest.approx(_duration(bf16, "head.logits"), rel=1e-12)
    ratio = _duration(bf16, "L1.fc1") / _duration(fp8, "L1.fc1")
    assert 1.3 < ratio < 2.0  # faster, never the full 2x of the peaks
    casts = fp8[fp8["name"].str.contains(".fp8_", regex=False)]
    assert len(casts) > 0 and (casts["bytes"] > 0).all()
    summary = summarize(result)
    device = result.job.cluster.device
    ratio = device.peak_flops("bf16") / device.peak_flops("fp8")
    assert summary["mfu_fp8_peak"] == pytest.approx(summary["mfu"] * ratio, rel=1e-6)


def test_a_bf16_plan_has_no_fp8_mfu() -> None:
    result, _ = _spans("bf16")
    assert summarize(result)["mfu_fp8_peak"] is None
