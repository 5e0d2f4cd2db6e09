"""H100 BF16 GEMM prices against a published BF16 sweep (a known miss, recorded as such).

Fact: OpenXLA's GPU cost-model table ``xla/service/gpu/model/matmul_interpolator_data.h``
(tensorflow/tensorflow ``third_party/xla/...``, commit 372d578b), key ``sm_90``, entry
``bf16xbf16->bf16``: measured FLOP/s of batched GEMMs on an H100; the largest shapes reach
783 TFLOP/s at 4096^3 (79% of 989), as ml-engineering's MAMF table does (H100 SXM BF16 794.5,
torch.randn inputs). The preset's ``gemm_efficiency`` is the FP8 cuBLASLt ratio (1377.3 / 1979,
Azure) standing in for BF16, which prices the large shapes 11-19% slower than the table. Putting the
BF16 figure in makes ``validate --published`` worse (H100 rows are already simulated too fast), so
the test is an expected failure until whatever else the H100 rows lack is modelled.
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


@pytest.mark.xfail(strict=True, reason="BF16 proxied by the FP8 cuBLASLt ratio; see the module docstring")
def test_h100_bf16_gemms_within_10_percent_of_the_published_sweep() -> None:
    for (b, m, n, k), tflops in XLA_SM90_BF16.items():
        assert _model_tflops(b, m, n, k) == pytest.approx(tflops, rel=0.10), (b, m, n, k)
