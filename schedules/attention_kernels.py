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
"""

from __future__ import annotations

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
