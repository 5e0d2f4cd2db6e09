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


@pytest.mark.parametrize(("argv", "message"), [
    (["--fp8-recipe", "rowwise"], "fp8_recipe='rowwise' is invalid: an FP8 setting needs dtype fp8 (got dtype bf16)"),
    (["--dtype", "fp8", "--fp8-recipe", "mxfp8"], "fp8_recipe='mxfp8' is invalid: needs a Blackwell GPU"),
    (["--dtype", "fp8", "--cluster", "dgx-a100"], "dtype='fp8' is invalid: device 'a100-80gb' supports fp32, tf32"),
])
def test_fp8_settings_the_job_cannot_run_are_one_line_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                             message: str) -> None:
    from sim.cli.main import main

    assert main(["simulate", "--no-report", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_the_fp8_job_file_keys_are_the_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from sim.job import read_job_file

    path = tmp_path / "job.toml"
    path.write_text('[plan]\ndtype = "fp8"\nfp8_recipe = "blockwise"\nfp8_weight_cast = "use"\n'
                    'fp8_param_gather = true\nfp8_bf16_layers = 1\n')
    plan = resolve_job(read_job_file(path)).plan
    assert (plan.fp8_recipe, plan.fp8_weight_cast, plan.fp8_param_gather, plan.fp8_bf16_layers) == (
        "blockwise", "use", True, 1)
