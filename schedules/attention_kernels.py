"""Fused (flash) attention kernels and their speed relative to FlashAttention-2.

The device's ``attention_efficiency`` is a measured FlashAttention-2 rate
(:mod:`topo.device_presets`); another fused kernel runs at a fraction of it, per pass, carried by
the attention op as ``Op.rate`` and applied to its math time by :mod:`sim.pricing`.

Fact (component level): Dao, "FlashAttention-2: Faster Attention with Better Parallelism and
Work Partitioning", arXiv 2307.08691, section 4.1, A100 80GB SXM4, sequence 512 to 16k, head
dimension 64 and 128, with and without a causal mask: "FlashAttention-2 is around 1.3-1.5x faster
than FlashAttention in Triton in the forward pass and around 2x faster in the backward pass."
The Triton kernel's forward rate is taken at the least slowdown the fact allows (1 / 1.3), its
backward at 1 / 2. A recomputed forward is a forward pass. Reading (an approximation, stated):
llm-foundry's ``attn_impl: triton`` (adapted from flash-attn's Triton kernel) runs at the rate of
the Triton FlashAttention the paper measured, on every GPU generation.

A causal mask slows every fused kernel by FlashAttention-2's measured causal / unmasked ratio
at the op's shape (:func:`causal_rate`, below): the paper's Triton ratios hold "with and without
a causal mask", so the Triton kernel's causal rate is FA2's causal rate times them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum


class AttentionKernel(StrEnum):
    """Which fused attention kernel runs (used when ``plan.flash_attention`` is on)."""

    FLASH2 = "flash2"  # FlashAttention-2 (CUDA): the device's measured rate
    TRITON = "triton"  # FlashAttention in Triton (llm-foundry's attn_impl: triton)


ATTENTION_KERNELS = tuple(k.value for k in AttentionKernel)
FORWARD_RATE = {AttentionKernel.FLASH2: 1.0, AttentionKernel.TRITON: 1 / 1.3}
BACKWARD_RATE = {AttentionKernel.FLASH2: 1.0, AttentionKernel.TRITON: 1 / 2.0}


def kernel_rate(kernel: str, backward: bool) -> float:
    """Fraction of the FlashAttention-2 rate ``kernel`` reaches in the forward or backward pass."""
    return (BACKWARD_RATE if backward else FORWARD_RATE)[AttentionKernel(kernel)]


# --- A causal mask's effect on the fused kernel's rate ------------------------------------------

FA2_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
"""Sequence lengths of flash-attention's ``benchmarks/benchmark_flash_attention.py``
(``bs_seqlen_vals``: batch x length = 16k tokens, model dim 2048, fp16)."""

FA2_FWD_BWD_TFLOPS: dict[tuple[str, int, bool], tuple[float, ...]] = {
    # (GPU, head dim, causal): forward + backward TFLOP/s at FA2_SEQ_LENS
    ("a100", 64, False): (132, 153, 162, 171, 175, 176),
    ("a100", 128, False): (151, 173, 187, 196, 201, 203),
    ("a100", 64, True): (88, 119, 140, 156, 165, 171),
    ("a100", 128, True): (99, 133, 155, 173, 182, 189),
    ("h100", 64, False): (215, 254, 274, 288, 294, 296),
    ("h100", 128, False): (248, 294, 320, 326, 335, 338),
    ("h100", 64, True): (141, 192, 232, 257, 273, 284),
    ("h100", 128, True): (163, 221, 265, 294, 308, 328),
}
"""FlashAttention-2's measured forward + backward rates, the bars labelled "FlashAttention-2" of
flash-attention's README plots (section "Performance"; Dao-AILab/flash-attention commit 4f285b35,
"FlashAttention-2 release", 2023-07-17): ``assets/flash2_a100_fwd_bwd_benchmark.png`` (A100 80GB
SXM4) and ``assets/flash2_h100_fwd_bwd_benchmark.png`` (H100 80GB SXM5), panels (a)-(d): without
and with a causal mask, head dimension 64 and 128. Values are the bars' printed labels, except
A100 head dim 64 at 1k and head dim 128 at 512 and 1k, whose labels the legend covers: read from
the bar heights against the labelled bars of the same panel (153, 151, 173; +-1). The script counts
a causal pass as half the FLOPs (``flops(..., causal)``: ``4 b s^2 heads d // 2``), as the simulator
does (:mod:`schedules.layer_ops`, ``causal_share``), so the ratio of a causal rate to the
non-causal one at the same shape is the factor by which the causal kernel is slower per counted
FLOP."""

FA2_GPUS = {"a100": 80, "h100": 90}
"""The CUDA compute capability (x10) of each benchmarked GPU. A device of a later generation uses
the nearest one at or below it (Ada 8.9 the A100's, Blackwell 10.0 the H100's: no published
FlashAttention-2 causal figure for them); a device without one (0: a CPU process, or a calibrated
profile, whose microbenchmark measures causal attention itself) gets no causal factor."""


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear in ``x`` through (xs, ys), the end values beyond them (nearest)."""
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def _fa2_ratio(seq_len: float, head_dim: float, bars: Callable[[int], tuple[float, ...]]) -> float:
    """A ratio of FlashAttention-2 bars (``bars(head_dim)``, one per :data:`FA2_SEQ_LENS`) at
    ``seq_len`` and ``head_dim``: linear in log2 of the length between the benchmark's lengths
    (512 ... 16k, the end values outside), then linear in the head dimension between 64 and 128
    (the end values outside)."""
    logs = tuple(math.log2(s) for s in FA2_SEQ_LENS)
    ratios = tuple(_interp(logs, bars(d), math.log2(seq_len)) for d in (64, 128))
    return _interp((64.0, 128.0), ratios, head_dim)


def fa2_causal_ratio(gpu: str, seq_len: float, head_dim: float) -> float:
    """Causal over non-causal FlashAttention-2 rate (both over their own FLOP counts) on ``gpu``
    ("a100" | "h100") at ``seq_len`` tokens and head dimension ``head_dim`` (:func:`_fa2_ratio`)."""
    def bars(d: int) -> tuple[float, ...]:
        causal, full = FA2_FWD_BWD_TFLOPS[gpu, d, True], FA2_FWD_BWD_TFLOPS[gpu, d, False]
        return tuple(c / f for c, f in zip(causal, full, strict=True))
    return _fa2_ratio(seq_len, head_dim, bars)


REFERENCE_SEQ_LEN = 8192
"""Sequence length of the devices' measured attention rate (:mod:`topo.device_presets`: the Azure
guide runs flash-attention's benchmark at batch 2, sequence 8192, and keeps only that line)."""


def fa2_length_ratio(gpu: str, seq_len: float, head_dim: float) -> float:
    """Non-causal FlashAttention-2 rate at ``seq_len`` over the rate at :data:`REFERENCE_SEQ_LEN`,
    same GPU and head dimension (:func:`_fa2_ratio`): a short sequence's kernel walks a short k
    loop per query tile, its prologue and epilogue unhidden (the plots' bars fall from 335 at 8k
    to 248 at 512 on H100 at head dim 128, with the same 16k tokens per batch)."""
    def bars(d: int) -> tuple[float, ...]:
        full = FA2_FWD_BWD_TFLOPS[gpu, d, False]
        return tuple(f / full[FA2_SEQ_LENS.index(REFERENCE_SEQ_LEN)] for f in full)
    return _fa2_ratio(seq_len, head_dim, bars)


def _fa2_gpu(compute_capability: int) -> str:
    """The benchmarked GPU whose bars a device uses (:data:`FA2_GPUS`)."""
    return max((g for g, cc in FA2_GPUS.items() if cc <= compute_capability), key=FA2_GPUS.__getitem__,
               default="a100")


def fused_attention_rate(compute_capability: int, query_len: float, key_len: float, head_dim: float,
                         causal: bool) -> float:
    """Fraction of the device's attention rate (measured unmasked at :data:`REFERENCE_SEQ_LEN`) a
    fused attention op reaches at its shape: its kernels' length ratio at ``query_len`` (the
    tokens each kernel attends from: the sequence, or a ring-attention rank's share) times, with a
    causal mask, :func:`causal_rate`. 1 on a device without a compute capability."""
    if compute_capability <= 0:
        return 1.0
    length = fa2_length_ratio(_fa2_gpu(compute_capability), query_len, head_dim)
    return length * (causal_rate(compute_capability, query_len, key_len, head_dim) if causal else 1.0)


def causal_rate(compute_capability: int, query_len: float, key_len: float, head_dim: float) -> float:
    """Fraction of the device's (non-causal) fused-attention rate a causal attention op reaches.

    ``query_len`` is the tokens of one sequence this rank attends from, ``key_len`` the
    sequence's length: equal without context parallelism. With ring attention over
    ``cp = key_len / query_len`` ranks, Transformer Engine's load-balanced ring
    (``AttnFuncWithCPAndKVP2P`` in ``transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py``; torch's ``_templated_ring_attention`` does the same) runs one causal
    kernel over the rank's own ``query_len`` tokens (step 0, 1/cp of the rank's work) and cp - 1
    unmasked kernels over the other ranks' halves, so only that share is slowed:
    1 / (share / ratio(query_len) + 1 - share). 1 on a device without a compute capability
    (:data:`FA2_GPUS`)."""
    if compute_capability <= 0:
        return 1.0
    gpu = _fa2_gpu(compute_capability)
    share = min(1.0, query_len / key_len)
    return 1.0 / (share / fa2_causal_ratio(gpu, query_len, head_dim) + 1.0 - share)
