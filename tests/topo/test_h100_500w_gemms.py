"""The 500 W H100 (h100-sxm-hbm2e, Meta's Grand Teton hosts) against GEMMs measured on that part:
BF16 and FP8 (cuBLASLt tensorwise) TFLOP/s from pytorch/FBGEMM PR #2546 ("H100 500W", shapes
M, N, K), pytorch-labs/float8_experimental PR #100 (Llama-70B-like shapes M, K, N, Sep 2023) and
float8_experimental 0b60496 (the Llama 3 8B feed-forward, Jun 2024). The preset's two GEMM
efficiencies are the geometric-mean fit of these; the test bounds the spread around it."""

from __future__ import annotations

import pytest

from topo import get_device
from topo.device_presets import H100_500W_TENSOR_RATE
from topo.gemm_shape import GemmShape, gemm_time_s

# (m, n, k) as GemmShape takes them -> measured TFLOP/s
BF16 = {(8192, 8192, 8192): 585.23, (65536, 8192, 7168): 575.12, (65536, 3584, 8192): 546.31,
        (16384, 1280, 8192): 552.0, (16384, 8192, 1024): 551.0, (16384, 7168, 8192): 559.0,
        (16384, 8192, 3584): 591.0, (8192, 14336, 4096): 554.0}
FP8 = {(16384, 1280, 8192): 1408.0, (16384, 8192, 1024): 1070.0, (16384, 7168, 8192): 1310.0,
       (16384, 8192, 3584): 1370.0, (8192, 14336, 4096): 1063.0}


def _tflops(dtype: str, mnk: tuple[int, int, int]) -> float:
    d = get_device("h100-sxm-hbm2e")
    shape = GemmShape(*mnk)
    return shape.flops / (gemm_time_s(d, shape, dtype) + d.kernel_overhead_s) / 1e12


@pytest.mark.parametrize(("dtype", "rows", "mape", "worst"), [("bf16", BF16, 0.05, 0.08), ("fp8", FP8, 0.10, 0.25)])
def test_500w_gemms_against_their_measurements(dtype: str, rows: dict, mape: float, worst: float) -> None:
    errors = [_tflops(dtype, mnk) / tflops - 1 for mnk, tflops in rows.items()]
    assert sum(abs(e) for e in errors) / len(errors) < mape
    assert max(abs(e) for e in errors) < worst


def test_the_power_cap_slows_tensor_cores_as_it_slows_the_same_bf16_gemm() -> None:
    """8192^3 BF16: 585.23 TFLOP/s at 500 W (FBGEMM #2546) vs 797.51 on the 700 W part."""
    assert H100_500W_TENSOR_RATE == pytest.approx(0.7338, abs=1e-4)
    hbm3, capped = get_device("h100-sxm"), get_device("h100-sxm-hbm2e")
    rate = capped.attention_efficiency * capped.peak_bf16_flops / (hbm3.attention_efficiency * hbm3.peak_bf16_flops)
    assert rate == pytest.approx(H100_500W_TENSOR_RATE)
