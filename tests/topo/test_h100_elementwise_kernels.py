"""Element-wise kernels priced against kernels measured on an H100.

Fact: AMD-AGI/TraceLens @ 171dd747, ``tests/traces/compare_test_e2e/reference/h100_perf_report_csvs/``
(``BinaryElementwise.csv``, ``UnaryElementwise.csv``, ``Reduce_fwd.csv``): a torch.profiler trace of
an eager Qwen forward (16 x 559 tokens, hidden 1024, FFN 2816) on H100, each aten op's kernel
median over 24-49 calls and the bytes it moves ("Data Moved (MB)", in MiB: 3 x 9.16M bf16
elements = 52.41). The simulator prices a memory-bound kernel as ``kernel_overhead_s`` (4 us) +
bytes / (3.35 TB/s x the STREAM Triad fraction 0.887) (:func:`topo.compute.compute_time_s`).

- The vectorized kernels (``vectorized_elementwise_kernel<4, ...>``, contiguous operands of one
  shape) run at 2.4-3.1 TB/s: priced at 0.99-1.26x their time (the 4 us overhead is more than a
  kernel's own start and tail; a 0.07 MB kernel measures 1.6 us).
- Broadcast or strided operands fall back to ``elementwise_kernel<128, 4, ...>``, 1.5-2.3 TB/s:
  priced at 0.65-0.88x (a known miss for eager stacks' RoPE and layout copies; not modelled).
"""

from __future__ import annotations

import pytest

from core.vocab import OpClass
from topo.compute import compute_time_s
from topo.device_presets import get_device

MIB = 2**20

# (aten op and operands, MiB moved, median kernel microseconds)
VECTORIZED = [
    ("add bf16 [16,559,1024] + same", 52.40625, 17.856),
    ("mul bf16 [16,559,2816] * same", 144.1171875, 51.072),
    ("silu bf16 [16,559,2816]", 96.078125, 38.416),
    ("pow fp32 [16,559,1024]", 69.875, 26.400),
    ("copy bf16 -> fp32 [16,559,1024]", 52.40625, 18.240),
    ("mean fp32 [16,559,1024] over the last dim (reduce_kernel)", 34.9375, 15.072),
]
STRIDED = [
    ("add bf16 [16,16,559,64] + permuted", 52.40625, 34.784),
    ("mul bf16 [16,16,559,64] * [1,1,559,64]", 35.0057373046875, 32.000),
    ("mul bf16 [1024] * [16,559,1024]", 34.939453125, 25.088),
    ("mul fp32 [16,559,1024] * [16,559,1]", 69.90911865234375, 32.640),
    ("copy fp32 -> bf16 [16,559,1024] (unrolled_elementwise_kernel)", 52.40625, 29.216),
    ("neg bf16 [16,16,559,32] (a half of the head dim)", 17.46875, 12.192),
]


def _priced_us(mib: float) -> float:
    return 1e6 * compute_time_s(get_device("h100-sxm"), OpClass.ACTIVATION, 0.0, mib * MIB, "bf16")


@pytest.mark.parametrize(("op", "mib", "measured_us"), VECTORIZED)
def test_streaming_kernels_are_priced_at_their_measured_time(op: str, mib: float, measured_us: float) -> None:
    """Never faster than measured by more than 2%, and at most 30% slower (the fixed overhead)."""
    assert 0.98 < _priced_us(mib) / measured_us < 1.30, op


@pytest.mark.xfail(strict=True, reason="known miss: TensorIterator's non-vectorized kernel for broadcast or "
                   "strided operands runs at about half the STREAM rate on H100; not modelled")
@pytest.mark.parametrize(("op", "mib", "measured_us"), STRIDED)
def test_strided_kernels_are_priced_at_their_measured_time(op: str, mib: float, measured_us: float) -> None:
    assert 0.9 < _priced_us(mib) / measured_us < 1.30, op
