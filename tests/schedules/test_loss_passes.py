"""The loss's memory traffic against the code that runs it: Megatron's unfused vocab-parallel
cross-entropy (megatron/core/tensor_parallel/cross_entropy.py @core_r0.8.0) touches the fp32
logits 9.5 times forward (.float() 1.5, max 1, subtract 2, exp 2, sum 1, divide 2) and 3.5 times
backward (mul_ 2, .float()'s backward 1.5)."""

from __future__ import annotations

import pytest

from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stage_ops import head_ops

MODEL = ModelSpec(num_layers=2, hidden_size=1024, num_heads=8, vocab_size=131072, seq_len=4096)


def _loss_bytes(plan: ParallelPlan) -> tuple[float, float]:
    fwd = {op.name: op.bytes for op in head_ops(MODEL, plan, backward=False)}
    bwd = {op.name: op.bytes for op in head_ops(MODEL, plan, backward=True)}
    return fwd["head.loss"], bwd["head.loss.grad"]


@pytest.mark.parametrize("tp", [1, 4])
def test_megatron_cross_entropy_passes_over_the_fp32_logits(tp: int) -> None:
    plan = ParallelPlan(tp=tp, microbatch_size=2, global_batch=2, sequence_parallel=tp > 1)
    fp32_logits = 4 * 2 * 4096 * 131072 / tp  # each TP rank holds its vocabulary slice
    assert _loss_bytes(plan) == pytest.approx((9.5 * fp32_logits, 3.5 * fp32_logits))


def test_torch_cross_entropy_keeps_its_own_passes() -> None:
    """F.cross_entropy(logits.float()) on bf16 activations: 3.5 and 5.5 fp32 passes
    (tests/schedules/test_torch_loss_passes.py counts them)."""
    plan = ParallelPlan(framework="torch", microbatch_size=2, global_batch=2)
    fp32_logits = 4 * 2 * 4096 * 131072
    assert _loss_bytes(plan) == pytest.approx((3.5 * fp32_logits, 5.5 * fp32_logits))
