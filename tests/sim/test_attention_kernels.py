"""The fused attention kernel's speed per pass relative to FlashAttention-2 (schedules.attention_kernels):
the fact's ratios, the ops a built graph carries, and their prices."""

from __future__ import annotations

import pytest

from core.taskgraph import Op
from schedules.attention_kernels import kernel_rate
from schedules.frameworks import get_framework
from sim.cli.main import main
from sim.job import resolve_job
from sim.simulate import build_priced


def test_rates_are_the_papers_ratios() -> None:
    # Dao 2023, sec. 4.1: FA2 is ~1.3-1.5x faster than Triton forward, ~2x backward
    assert kernel_rate("flash2", backward=False) == kernel_rate("flash2", backward=True) == 1.0
    assert 1 / kernel_rate("triton", backward=False) == pytest.approx(1.3)
    assert 1 / kernel_rate("triton", backward=True) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        kernel_rate("xformers", backward=False)


def _attention_ops(kernel: str, recompute: str = "full") -> list[tuple[Op, float, float]]:
    job = resolve_job(dict(model="llama3-8b", cluster="dgx-h100", nodes=1, tp=1, pp=1, microbatch_size=1,
                           global_batch=8, seq_len=8192, recompute=recompute, attention_kernel=kernel))
    priced = build_priced(job)
    coster = priced.coster
    pace = coster.compute_pace  # the slowest GPU's pace multiplies the whole kernel
    return [(op, coster.op_duration(op, t.rank) / pace, coster.device.kernel_overhead_s)
            for t in priced.graph.tasks if t.step == 0 for op in t.ops if op.op_class == "attention"]


def test_graph_carries_each_pass_rate_and_pricing_divides_the_math() -> None:
    fast, slow = _attention_ops("flash2"), _attention_ops("triton")
    assert len(fast) == len(slow) > 0
    passes = set()
    for (f, f_s, overhead), (s, s_s, _) in zip(fast, slow, strict=True):
        assert f.flops == s.flops and f.rate == 1.0  # same work counted; only the kernel's speed differs
        backward = s.name.endswith(".bwd")
        passes.add("bwd" if backward else "recompute" if "recompute" in s.name else "fwd")
        assert s.rate == pytest.approx(1 / 2.0 if backward else 1 / 1.3)
        assert (s_s - overhead) == pytest.approx((f_s - overhead) / s.rate, rel=1e-9)
    assert passes == {"fwd", "bwd", "recompute"}


def test_llm_foundry_preset_runs_triton_and_flag_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert get_framework("llm-foundry").value("attention_kernel") == "triton"
    assert get_framework("torchtitan").value("attention_kernel") == "flash2"
    assert main(["simulate", "--attention-kernel", "cutlass", "--no-report"]) == 2
    assert "invalid choice: 'cutlass'" in capsys.readouterr().err
