"""GEMM time by shape (topo/gemm_shape.py) against published cuBLASLt sweeps and the closed forms of
tile and wave quantisation.

Sweeps (TFLOPS, cuBLASLt, random inputs, 10,000 warm-up iterations), Azure/AI-benchmarking-guide:
- ``Azure_Results/ND_A100_v4_results.md``: A100-SXM4-80GB, FP16, CUDA 12.5;
- ``Azure Results/ND_H100_v5_results.md``: H100 80GB HBM3, FP8, CUDA 12.6.
Measured time = the kernel plus its launch and tail, so the prediction adds the preset's
``kernel_overhead_s`` as :func:`topo.compute.compute_time_s` does.
"""

from __future__ import annotations

import pytest

from topo import get_device
from topo.gemm_shape import (
    TILES,
    GemmShape,
    gemm_math_s,
    gemm_shape_efficiency,
    gemm_time_s,
    linear_gemms,
    quantised_fraction,
    waves,
)

A100_FP16 = [((1024, 1024, 1024), 119.4), ((2048, 2048, 2048), 221.8), ((4096, 4096, 4096), 228.0),
             ((8192, 8192, 8192), 253.7), ((16384, 16384, 16384), 256.5), ((1024, 2145, 1024), 132.8),
             ((6144, 12288, 12288), 250.8), ((802816, 192, 768), 157.8)]
H100_FP8 = [((1024, 1024, 1024), 274.1), ((2048, 2048, 2048), 1011.3), ((4096, 4096, 4096), 1216.9),
            ((8192, 8192, 8192), 1290.1), ((16384, 16384, 16384), 1377.3), ((32768, 32768, 32768), 1382.2),
            ((1024, 2145, 1024), 410.7), ((6144, 12288, 12288), 1351.4)]
# Known miss: H100 FP8 802816x192x768 measured 663.8; the model says ~751 (+13%): a memory-heavy
# shape where max(math, memory) assumes the two overlap perfectly (its BF16 output is counted:
# C/D of cuBLAS's FP8 kernels are BF16, TransformerEngine issue #1391).
H100_FP8_MISS = ((802816, 192, 768), 663.8)


def predicted_tflops(device: str, dtype: str, mnk: tuple[int, int, int]) -> float:
    d = get_device(device)
    shape = GemmShape(*mnk)
    return shape.flops / (gemm_time_s(d, shape, dtype) + d.kernel_overhead_s) / 1e12


@pytest.mark.parametrize(("device", "dtype", "rows"), [("a100-80gb", "fp16", A100_FP16),
                                                       ("h100-sxm", "fp8", H100_FP8)])
def test_published_cublaslt_sweeps(device: str, dtype: str, rows: list) -> None:
    errors = [predicted_tflops(device, dtype, mnk) / measured - 1 for mnk, measured in rows]
    assert max(abs(e) for e in errors) < 0.20  # worst: A100 2048^3, -17%
    assert sum(abs(e) for e in errors) / len(errors) < 0.06  # A100 5.0%, H100 2.7%


def test_known_miss_is_over_predicted() -> None:
    mnk, measured = H100_FP8_MISS
    assert predicted_tflops("h100-sxm", "fp8", mnk) > measured


def test_small_gemms_far_below_the_constant_efficiency() -> None:
    # A100 FP16 1024^3 measured 119.4 TFLOPS = 0.38 of peak; the size-free roofline says 0.82
    d = get_device("a100-80gb")
    assert gemm_shape_efficiency(d, GemmShape(1024, 1024, 1024), "fp16") < 0.6 * d.gemm_efficiency


def test_reference_shape_reproduces_the_preset() -> None:
    for name in ("a100-80gb", "h100-sxm", "b200"):
        d = get_device(name)
        eff = gemm_shape_efficiency(d, GemmShape(16384, 16384, 16384), "bf16")
        assert eff == pytest.approx(d.gemm_efficiency, rel=1e-9)


def test_mamf_best_shape_cross_source() -> None:
    # stas00/ml-engineering compute/accelerator/README.md, MAMF table: A100 SXM BF16 267.9 TFLOPS
    # at 6912x16384x2048 (CUDA 12.1), another machine than Azure's: within 10%.
    assert predicted_tflops("a100-80gb", "bf16", (6912, 16384, 2048)) == pytest.approx(267.9, rel=0.10)


def test_one_tile_past_a_full_wave_doubles_the_time() -> None:
    # 108 tiles of 128x128 fill the A100's 108 SMs once; 109 need a second wave (guide sec. 3.2).
    d = get_device("a100-80gb")
    full, over = GemmShape(128 * 108, 128, 8192), GemmShape(128 * 109, 128, 8192)
    assert waves(108, 108) == 1 and waves(109, 108) == 2
    assert gemm_math_s(d, over, "bf16") / gemm_math_s(d, full, "bf16") == pytest.approx(2.0)


def test_tile_quantisation_closed_form() -> None:
    # n = 129 pads to two 128-wide tile columns: 129 / 256 of the SM time is useful (k fill aside)
    shape = GemmShape(128 * 108 * 4, 129, 1 << 20)
    best = max(quantised_fraction(shape, t, 108) for t in TILES)
    k_part = shape.k / (shape.k + 128)
    assert best == pytest.approx(129 / 256 * k_part)


def test_k_fill_closed_form() -> None:
    # a full wave with k = 128: half the tile time is the pipeline fill of (3 - 1) x 64
    shape = GemmShape(128 * 108, 128, 128)
    assert quantised_fraction(shape, (128, 128), 108) == pytest.approx(0.5)


def test_fewer_sms_cost_whole_waves() -> None:
    # 132 tiles on an H100: one wave on 132 SMs, two on 108 (24 taken by a collective)
    d = get_device("h100-sxm")
    shape = GemmShape(128 * 132, 256, 8192)
    assert gemm_math_s(d, shape, "bf16", 108) / gemm_math_s(d, shape, "bf16") == pytest.approx(2.0)


def test_batched_gemm_counts_tiles_over_the_batch() -> None:
    d = get_device("a100-80gb")
    one, many = GemmShape(2048, 2048, 128), GemmShape(2048, 2048, 128, batch=32)
    assert gemm_math_s(d, many, "bf16") <= 32 * gemm_math_s(d, one, "bf16")


def test_linear_gemms_have_the_layer_flops() -> None:
    fwd, dgrad, wgrad = linear_gemms(4096, 8192, 1024)
    assert fwd.flops == dgrad.flops == wgrad.flops == 2 * 4096 * 8192 * 1024
    assert wgrad.k == 4096


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="^m=0 is invalid"):
        GemmShape(0, 1, 1)
    with pytest.raises(ValueError, match="sm_count"):
        gemm_time_s(get_device("cpu-host"), GemmShape(8, 8, 8), "fp32")
