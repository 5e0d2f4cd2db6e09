"""The rate of element-wise kernels with a broadcast or strided 16-bit operand.

PyTorch's TensorIterator runs an element-wise op as a vectorized kernel
(``vectorized_elementwise_kernel<4, ...>``) only when every operand is contiguous and of one shape
(aten/src/ATen/native/cuda/CUDALoops.cuh ``gpu_kernel_impl``: ``iter.is_contiguous()``); an operand
that is broadcast (a norm's weight ``[h]`` against ``[tokens, h]``, RoPE's ``cos`` table against
``[s, b, heads, d]``) or strided (a half taken by ``torch.chunk`` or a slice of the last dimension,
a permuted view) sends it to the non-vectorized ``elementwise_kernel<128, 4, ...>``, which computes
every operand's offset per element.

Fact (H100 SXM): AMD-AGI/TraceLens @ 171dd747,
``tests/traces/compare_test_e2e/reference/h100_perf_report_csvs/`` (``BinaryElementwise.csv``,
``UnaryElementwise.csv``; a torch.profiler trace of an eager Qwen forward, bf16): the four 16-bit
kernels of that kind move 1.15 TB/s (q ``[16,16,559,64]`` x the cos table ``[1,1,559,64]``),
1.46 (x ``[16,559,1024]`` x the norm weight ``[1024]``), 1.50 (negation of a strided half) and
1.58 (add of a permuted operand), median 1.48 TB/s, where the contiguous kernels of the same trace
run at 2.4-3.1 TB/s and STREAM Triad at 2.97 TB/s (the H100 preset's ``hbm_efficiency``).
Cross-check: linkedin/Liger-Kernel @ ead96b61 ``benchmark/data/all_benchmark_data.csv``,
``megatron_swiglu`` provider "torch" (eager ``F.silu(y_1) * y_2`` over ``torch.chunk(y, 2, -1)``,
H100, S 2048 x B 4): two kernels each reading a strided half, 1.75-1.80 TB/s
(tests/topo/test_h100_elementwise_kernels.py).

fp32 kernels of that kind (the TraceLens trace's ``x * rstd`` at 2.25 TB/s and its fp32 -> bf16
cast at 1.88) keep the streaming rate: their rate per element is the 16-bit kernels', which is the
STREAM rate in bytes for 4-byte elements (the residual miss is pinned as a strict xfail there).
"""

from __future__ import annotations

STRIDED_STREAM_FRACTION = 0.5
"""Fraction of the STREAM rate a 16-bit broadcast/strided element-wise kernel reaches: the H100
median above, 1.48 / 2.97 = 0.498 (module docstring). Other GPUs: the same fraction of their
STREAM rate (the rule; no measurement of the non-vectorized kernel on them was found beyond a
B200 strided copy of 10 MB, 7.04 us measured, priced 6.9 us at this fraction)."""
