"""Megatron-Core's SwiGLU (``bias_swiglu_impl``) priced against Liger-Kernel's H100 measurements.

Code: NVIDIA/Megatron-LM ``megatron/core/fusions/fused_bias_swiglu.py`` at core_r0.8.0 and at
core_v0.16.1: ``swiglu(y)`` (``torch.chunk(y, 2, -1)``, ``F.silu(y_1) * y_2``) and ``swiglu_back(g, y)``
(``torch.cat`` of the two halves' gradients) are decorated with ``jit_fuser``, which
``megatron/core/jit.py`` sets to ``torch.compile`` from torch 2.2 (TorchScript only before). So the
forward is one generated kernel reading y (2 halves) and writing the product: 3 passes of an
[tokens, ffn_local] half; the backward one kernel reading g and y and writing both halves'
gradients: 5 passes. The halves are read by a generated kernel at row offsets, not by
TensorIterator's strided path, so no pass is priced at the strided rate (schedules.elementwise
``STRIDED_PASSES["fused"]``). The simulator's fused SwiGLU is exactly that: (3, 5).

Measurement: linkedin/Liger-Kernel @ ead96b61 ``benchmark/data/all_benchmark_data.csv``,
``megatron_swiglu`` rows on "NVIDIA H100 80GB HBM3" (benchmark/scripts/benchmark_megatron_swiglu.py:
S 2048 x B 4 = 8192 tokens, bf16, triton.testing.do_bench medians; PR #1326: megatron-core 0.16.1).
Mode "backward" times the forward, ``out.sum()`` and the backward together.
"""

from __future__ import annotations

import pytest

from core.vocab import OpClass
from schedules.elementwise import ELEMENTWISE_PASSES, STRIDED_PASSES
from topo.compute import compute_time_s
from topo.device_presets import get_device

TOKENS = 2048 * 4
LIGER_FORWARD_MS = {2048: 0.039583999663591385, 4096: 0.07251200079917908, 8192: 0.13708800077438354,
                    16384: 0.2670080065727234, 32768: 0.5275039970874786}  # provider "liger"
MEGATRON_FORWARD_MS = 0.22015999257564545  # provider "megatron", ffn_local 8192
MEGATRON_FWD_BWD_MS = 0.6568639874458313  # provider "megatron", mode "backward", ffn_local 4096


def _kernel_ms(passes: float, ffn_local: int) -> float:
    """One kernel moving ``passes`` bf16 [tokens, ffn_local] tensors on an H100, ms."""
    nbytes = passes * TOKENS * ffn_local * 2
    return 1e3 * compute_time_s(get_device("h100-sxm"), OpClass.ACTIVATION, 0.0, nbytes, "bf16")


def _fwd_bwd_ms(ffn_local: int) -> float:
    """The benchmark's forward, ``out.sum()`` (a reduction reading the output) and backward."""
    fwd, bwd = ELEMENTWISE_PASSES["fused"]["swiglu"]
    return _kernel_ms(fwd, ffn_local) + _kernel_ms(1, ffn_local) + _kernel_ms(bwd, ffn_local)


def test_megatron_swiglu_is_priced_as_compiled_fused_passes() -> None:
    assert ELEMENTWISE_PASSES["fused"]["swiglu"] == (3, 5)
    assert "swiglu" not in STRIDED_PASSES["fused"]


@pytest.mark.parametrize(("ffn_local", "measured_ms"), sorted(LIGER_FORWARD_MS.items()))
def test_three_pass_forward_matches_liger_fused_kernel(ffn_local: int, measured_ms: float) -> None:
    """The traffic count is right: Liger's one fused kernel moves the same 3 passes, within 10%."""
    assert 0.9 < _kernel_ms(3, ffn_local) / measured_ms < 1.1, ffn_local


@pytest.mark.xfail(strict=True, reason="known miss, not modelled: Megatron-Core's torch.compile'd swiglu "
                   "moves its 3 passes at 1.83 TB/s (0.62 of Liger's kernel on the same traffic) and its "
                   "forward + backward takes 0.66 ms where 9 passes price 0.21; no component fact (a trace of "
                   "the generated kernels) says why, so no pass count or rate is changed for it")
def test_megatron_swiglu_forward_and_backward_match_liger_measurement() -> None:
    assert 0.85 < _kernel_ms(3, 8192) / MEGATRON_FORWARD_MS < 1.15
    assert 0.85 < _fwd_bwd_ms(4096) / MEGATRON_FWD_BWD_MS < 1.15
