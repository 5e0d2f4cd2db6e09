"""H100 BF16 GEMM prices against published BF16 measurements: short sweeps (a known miss) and
sustained load (what the preset matches).

Short sweeps: OpenXLA's GPU cost-model table ``xla/service/gpu/model/matmul_interpolator_data.h``
(tensorflow/tensorflow ``third_party/xla/...``, commit 372d578b), key ``sm_90``, entry
``bf16xbf16->bf16``: measured FLOP/s of batched GEMMs on an H100; the largest shapes reach
783 TFLOP/s at 4096^3 (79% of 989), as ml-engineering's MAMF table does (H100 SXM BF16, 794.5,
50 warm-up and 100 timed iterations). The preset's ``gemm_efficiency`` is the FP8 cuBLASLt ratio
(1377.3 / 1979, Azure, after 10,000 warm-up iterations: a sustained figure) standing in for BF16,
which prices the large shapes 11-19% slower than the table.

Sustained load: huggingface/gpu-fryer runs 8192^3 BF16 GEMMs back to back for a minute on
"H100-SXM5-80GB HBM3" and counts completed GEMMs per second (README reference table and
``src/main.rs`` @704ba85): ~730 TFLOP/s with cuBLASLt (v1.1.0), ~676 with cuBLAS (v1.0.0,
c83e0ef), against 797.5 short-run at the same shape (zzc0721/torch-performance-test-data #79):
power-limited clocks cost 8.5-15%. The preset's price (667) lies at that sustained rate, so putting
the short sweep in with a sustained factor on top would make BF16 GEMMs faster than today, not
slower (docs/model-mechanisms.md, "H100 BF16 GEMMs", gives the effect on ``validate --published``).
The short-sweep test stays an expected failure.
"""

from __future__ import annotations

import pytest

from topo.device_presets import get_device
from topo.gemm_shape import GemmShape, gemm_shape_efficiency

# (batch, m, n, k) -> TFLOP/s, XLA sm_90 bf16 (values / 1e12, rounded to 0.1)
XLA_SM90_BF16 = {
    (1, 4096, 4096, 4096): 783.3,
    (2, 4096, 4096, 4096): 807.7,
    (1, 4096, 4096, 2048): 738.7,
    (1, 4096, 1024, 4096): 738.5,
    (2, 4096, 2048, 4096): 783.2,
}
MID_SHAPE = ((1, 2048, 4096, 1024), 594.2)  # k = 1024: the fill and the smaller waves cost more
# 8192^3 BF16 under a minute of back-to-back load (gpu-fryer README): cuBLAS v1.0.0, cuBLASLt v1.1.0
SUSTAINED_8192_BF16 = {"gpu-fryer cuBLAS (c83e0ef)": 676.0, "gpu-fryer cuBLASLt (c12f710)": 730.0}
SUSTAINED_TOLERANCE = 0.03  # the README rounds ("~676", "~730")


def _model_tflops(batch: int, m: int, n: int, k: int) -> float:
    device = get_device("h100-sxm")
    return gemm_shape_efficiency(device, GemmShape(m, n, k, batch), "bf16") * device.peak_flops("bf16") / 1e12


def test_the_model_prices_h100_bf16_gemms_below_the_published_sweep() -> None:
    """What holds today: the large shapes are priced 11-19% slower than measured; at k = 1024 the
    model's fill and quantisation bring it within 5%."""
    for (b, m, n, k), tflops in XLA_SM90_BF16.items():
        assert 0.80 * tflops <= _model_tflops(b, m, n, k) <= 0.90 * tflops, (b, m, n, k)
    shape, tflops = MID_SHAPE
    assert _model_tflops(*shape) == pytest.approx(tflops, rel=0.05)


def test_the_preset_prices_h100_bf16_at_the_sustained_measurement() -> None:
    """The 8192^3 BF16 price lies within the sustained (power-limited) measurements, not above."""
    low, high = min(SUSTAINED_8192_BF16.values()), max(SUSTAINED_8192_BF16.values())
    assert low * (1 - SUSTAINED_TOLERANCE) <= _model_tflops(1, 8192, 8192, 8192) <= high


@pytest.mark.xfail(strict=True, reason="the preset prices sustained load, the sweep is short-run; see the docstring")
def test_h100_bf16_gemms_within_10_percent_of_the_published_sweep() -> None:
    for (b, m, n, k), tflops in XLA_SM90_BF16.items():
        assert _model_tflops(b, m, n, k) == pytest.approx(tflops, rel=0.10), (b, m, n, k)
