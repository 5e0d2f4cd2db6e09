"""A causal mask's cost in the fused attention kernel, against flash-attention's published plots.

Fact: flash-attention's README ("Performance"), ``assets/flash2_a100_fwd_bwd_benchmark.png`` and
``assets/flash2_h100_fwd_bwd_benchmark.png`` (commit 4f285b35, the FlashAttention-2 release):
``benchmarks/benchmark_flash_attention.py``'s forward + backward TFLOP/s, 16k tokens per batch,
model dim 2048, with and without a causal mask, head dim 64 and 128, sequence 512 to 16k. The
script counts a causal pass as half the FLOPs (``flops(..., causal)``), as the simulator does, so
its causal kernel is slower per counted FLOP by the ratio of the two bars (H100, head dim 128, 8k:
308 against 335). The labels quoted below are read off the plots, independently of the module's
table.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from schedules.attention_kernels import (
    FA2_FWD_BWD_TFLOPS,
    FA2_SEQ_LENS,
    causal_rate,
    fa2_causal_ratio,
)
from schedules.attention_ops import model_layer_shape
from schedules.layer_ops import attention_core_ops, layer_shape
from schedules.model import ModelSpec
from schedules.moe import MoESpec
from schedules.plan import ParallelPlan
from sim.pricing import TaskCoster
from topo import get_cluster
from topo.collectives import CollectiveModel
from topo.device_presets import FA2_BENCH_FWD_BWD_FORWARDS, get_device
from topo.placement import Placement

# (GPU, head dim, sequence): (causal, non-causal) bar labels, fwd + bwd TFLOP/s
PLOT_LABELS = {
    ("h100", 128, 8192): (308, 335), ("h100", 64, 8192): (273, 294), ("h100", 128, 2048): (265, 320),
    ("h100", 64, 512): (141, 215), ("h100", 128, 16384): (328, 338),
    ("a100", 64, 8192): (165, 175), ("a100", 128, 8192): (182, 201), ("a100", 64, 2048): (140, 162),
    ("a100", 128, 4096): (173, 196), ("a100", 64, 512): (88, 132), ("a100", 128, 16384): (189, 203),
}
BATCH, SEQ, DIM = 2, 8192, 2048  # the shape the presets' non-causal rates were measured at


@pytest.mark.parametrize(("key", "bars"), PLOT_LABELS.items())
def test_ratio_is_the_plots_causal_over_non_causal_bar(key: tuple[str, int, int], bars: tuple[int, int]) -> None:
    gpu, head_dim, seq = key
    assert fa2_causal_ratio(gpu, seq, head_dim) == pytest.approx(bars[0] / bars[1], rel=1e-12)
    cc = {"a100": 80, "h100": 90}[gpu]
    assert causal_rate(cc, seq, seq, head_dim) == pytest.approx(bars[0] / bars[1], rel=1e-12)


def test_table_is_whole_and_causal_is_slower_at_every_shape() -> None:
    for gpu in ("a100", "h100"):
        for d in (64, 128):
            causal, full = FA2_FWD_BWD_TFLOPS[gpu, d, True], FA2_FWD_BWD_TFLOPS[gpu, d, False]
            assert len(causal) == len(full) == len(FA2_SEQ_LENS)
            ratios = [c / f for c, f in zip(causal, full, strict=True)]
            assert all(0.6 < r < 1.0 for r in ratios)
            assert ratios == sorted(ratios)  # the masked diagonal's overhead shrinks with length


def test_between_and_beyond_the_benchmarked_shapes() -> None:
    r2k, r4k = fa2_causal_ratio("h100", 2048, 128), fa2_causal_ratio("h100", 4096, 128)
    assert fa2_causal_ratio("h100", 2048 * math.sqrt(2), 128) == pytest.approx((r2k + r4k) / 2)  # log2 midpoint
    assert fa2_causal_ratio("h100", 256, 128) == fa2_causal_ratio("h100", 512, 128)  # nearest published
    assert fa2_causal_ratio("h100", 131072, 128) == fa2_causal_ratio("h100", 16384, 128)
    r64, r128 = fa2_causal_ratio("a100", 4096, 64), fa2_causal_ratio("a100", 4096, 128)
    assert fa2_causal_ratio("a100", 4096, 96) == pytest.approx((r64 + r128) / 2)
    assert fa2_causal_ratio("a100", 4096, 192) == r128 and fa2_causal_ratio("a100", 4096, 32) == r64


def test_generation_of_each_device() -> None:
    h100, a100 = fa2_causal_ratio("h100", 4096, 128), fa2_causal_ratio("a100", 4096, 128)
    assert h100 != a100
    for name, ratio in (("h100-sxm", h100), ("h200", h100), ("b200", h100), ("a100-80gb", a100),
                        ("l40s", a100), ("rtx-4090", a100), ("cpu-host", 1.0)):
        assert causal_rate(get_device(name).compute_capability, 4096, 4096, 128) == pytest.approx(ratio), name


def test_context_parallel_ring_slows_only_the_local_causal_kernel() -> None:
    """Ring attention over cp ranks: one causal kernel over the rank's own s/cp tokens (1/cp of
    its work), the other steps unmasked."""
    for cp in (2, 4, 8):
        r = fa2_causal_ratio("h100", SEQ / cp, 128)
        assert causal_rate(90, SEQ / cp, SEQ, 128) == pytest.approx(1 / (1 / (cp * r) + 1 - 1 / cp))
        assert causal_rate(90, SEQ, SEQ, 128) < causal_rate(90, SEQ / cp, SEQ, 128) < 1.0
    model = ModelSpec(num_layers=1, hidden_size=DIM, num_heads=16, vocab_size=32000, seq_len=SEQ)
    (op,) = attention_core_ops(layer_shape(model, ParallelPlan(cp=4, microbatch_size=1, global_batch=1)), 0,
                               "fwd", "attn")
    assert op.causal and (op.m, op.n, op.k) == (SEQ // 4, SEQ, 128)


def _kernel_s(device: str, head_dim: int, causal: bool, flash: bool = True) -> float:
    """Priced seconds of the benchmark's forward + backward (overheads and the slowest-GPU pace
    taken out), through the simulator's pricing."""
    cluster = {"h100-sxm": "dgx-h100", "a100-80gb": "dgx-a100"}[device]
    coster = TaskCoster(CollectiveModel(get_cluster(cluster, nodes=1)), Placement(sizes={"dp": 1}),
                        dtype="bf16", gpus_per_node=8)
    model = ModelSpec(num_layers=1, hidden_size=DIM, num_heads=DIM // head_dim, vocab_size=32000, seq_len=SEQ,
                      causal=causal)
    shape = layer_shape(model, ParallelPlan(microbatch_size=BATCH, global_batch=BATCH, flash_attention=flash))
    ops = (*attention_core_ops(shape, 0, "fwd", "attn"), *attention_core_ops(shape, 0, "bwd", "attn.bwd", factor=2))
    assert all(op.causal == (causal and flash) for op in ops)
    return sum(coster.op_duration(op, 0) / coster.compute_pace - coster.device.kernel_overhead_s for op in ops)


@pytest.mark.parametrize(("device", "head_dim", "causal_tflops"), [("h100-sxm", 128, 308.0), ("a100-80gb", 64, 165.0)])
def test_priced_causal_kernel_reproduces_the_causal_bar(device: str, head_dim: int, causal_tflops: float) -> None:
    """The causal kernel's time at the presets' shape is the plot's causal bar's, to within the
    3% by which the presets' (Azure) non-causal rates and the plots' differ."""
    causal_forward = 4 * BATCH * SEQ**2 * DIM / 2  # heads x head_dim = DIM; the script's halved count
    published_s = FA2_BENCH_FWD_BWD_FORWARDS * causal_forward / (causal_tflops * 1e12)
    assert _kernel_s(device, head_dim, causal=True) == pytest.approx(published_s, rel=0.03)


@pytest.mark.parametrize(("device", "head_dim", "bars"), [("h100-sxm", 128, (308, 335)), ("a100-80gb", 64, (165, 175))])
def test_causal_over_unmasked_time_is_the_plots(device: str, head_dim: int, bars: tuple[int, int]) -> None:
    """Half the work at the causal bar's rate: the time ratio is exactly 0.5 x the bars' inverse."""
    ratio = _kernel_s(device, head_dim, causal=True) / _kernel_s(device, head_dim, causal=False)
    assert ratio == pytest.approx(0.5 * bars[1] / bars[0], rel=1e-9)


def test_unfused_attention_is_not_slowed_by_the_causal_rate() -> None:
    """Without flash attention the s x s products are computed whole (batched GEMMs), no fused kernel."""
    assert _kernel_s("h100-sxm", 128, causal=True, flash=False) == pytest.approx(
        _kernel_s("h100-sxm", 128, causal=False, flash=False))


def test_moe_and_mla_layers_carry_their_own_head_dim() -> None:
    """A model whose attention is not ModelSpec's (MLA: head dim nope + rope = 192) is causal too,
    at its own head dim (beyond 128: the head dim 128 ratio)."""
    mla = {"head_dim": 192, "v_head_dim": 128, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64}
    base = ModelSpec(num_layers=2, hidden_size=2048, num_heads=16, vocab_size=32000, seq_len=4096)
    model = replace(base, moe=MoESpec(num_experts=8, top_k=2, expert_ffn_size=1024, attention=mla))  # type: ignore[arg-type]
    for cp in (1, 2):
        shape = model_layer_shape(model, ParallelPlan(cp=cp, microbatch_size=1, global_batch=1), 1)
        (op,) = attention_core_ops(shape, 1, "fwd", "attn")
        assert op.causal and (op.m, op.n, op.k) == (4096 // cp, 4096, 192)
    assert causal_rate(90, 4096, 4096, 192) == pytest.approx(294 / 326)  # H100 d128 4k bars
