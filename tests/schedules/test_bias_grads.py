"""Bias gradients as their own reduction (schedules/bias_grads.py): the reduction PyTorch's autograd
runs for a linear's bias, the bytes a GPT block's reductions read, and which stacks run them."""

from __future__ import annotations

import dataclasses

import pytest

from schedules.bias_grads import bias_grad_bytes, reduces_bias_grads
from schedules.frameworks import get_framework
from schedules.layer_ops import backward_ops, backward_weight_ops, forward_ops, layer_shape
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan

GPT = get_model("gpt3-1.7b")  # GPT-style: biases on
LLAMA = get_model("llama3-8b")  # no biases


def _plan(preset: str, **fields: object) -> ParallelPlan:
    return ParallelPlan(**{**get_framework(preset).plan_fields(), "global_batch": 8, **fields})


def test_autograd_runs_a_linear_bias_gradient_as_a_sum_over_the_tokens() -> None:
    """The fact: backward of nn.Linear with a bias on [batch, seq, in] runs one aten reduction that
    reads the whole output gradient and writes the bias's gradient (besides the two matmuls)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    batch, seq, width_in, width_out = 2, 64, 32, 48
    linear = torch.nn.Linear(width_in, width_out).to(torch.bfloat16)
    x = torch.randn(batch, seq, width_in, dtype=torch.bfloat16, requires_grad=True)
    y = linear(x)
    grad = torch.randn_like(y)
    reductions = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if func._schema.name.split("::")[-1] == "sum":
                tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
                reductions.append((tensors[0].numel(), out.numel()))
            return out

    with Record():
        y.backward(grad)
    assert reductions == [(batch * seq * width_out, width_out)]  # reads dy once, writes [out]
    assert torch.allclose(linear.bias.grad.float(), grad.float().sum(dim=(0, 1)), rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (2, True), (4, True)])
def test_a_gpt_blocks_reductions_read_each_biased_output_gradient_once(tp: int, sp: bool) -> None:
    plan = _plan("megatron-2021", tp=tp, sequence_parallel=sp, microbatch_size=2)
    tokens = 2 * GPT.seq_len
    h, ffn = GPT.hidden_size, GPT.ffn
    column = (3 * h + ffn) / tp  # q, k, v (GPT-3: as many K/V heads as heads) and fc1, split over TP
    row_tokens = tokens / tp if sp else tokens  # proj and fc2 add their full-width bias after the reduction
    expected = 2 * (tokens * column + row_tokens * 2 * h)
    assert bias_grad_bytes(GPT, plan, tokens) == pytest.approx(expected, rel=1e-12)
    assert layer_shape(GPT, plan).bias_grad_bytes == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("preset", "dtype", "reduces"), [
    ("megatron-2021", "bf16", True), ("megatron-2023", "bf16", True), ("deepspeed", "bf16", True),
    ("deepspeed-2021", "bf16", True),
    ("llm-foundry", "bf16", True), ("torchtitan", "bf16", True), ("fsdp2", "bf16", True),  # PyTorch's linears
    ("llm-foundry", "fp8", False),  # Transformer Engine's FP8 linears: in the gradient's cast-transpose
    ("megatron-core", "bf16", False), ("nemo", "bf16", False),  # Transformer Engine: the GEMM's epilogue
])
def test_which_stacks_run_a_reduction_of_their_own(preset: str, dtype: str, reduces: bool) -> None:
    assert reduces_bias_grads(_plan(preset, dtype=dtype)) is reduces


def test_the_reduction_runs_in_the_weight_gradient_pass_only_with_biases() -> None:
    plan = _plan("megatron-2021")
    shape = layer_shape(GPT, plan)
    names = [op.name for op in backward_weight_ops(plan, shape, 3)]
    assert names[-1] == "L3.bias_grad"
    assert [op.bytes for op in backward_weight_ops(plan, shape, 3) if op.name == "L3.bias_grad"] == [
        shape.bias_grad_bytes]
    assert "L3.bias_grad" in [op.name for op in backward_ops(plan, shape, 3, split=False)]
    assert "L3.bias_grad" not in [op.name for op in backward_ops(plan, shape, 3, split=True)]  # W runs apart
    assert not any("bias_grad" in op.name for op in forward_ops(plan, shape, 3))
    for model, fields in ((LLAMA, {}), (GPT, {"bias_grad": "epilogue"})):
        other = dataclasses.replace(plan, **fields)
        assert layer_shape(model, other).bias_grad_bytes == 0.0
        assert not any("bias_grad" in op.name for op in backward_weight_ops(other, layer_shape(model, other), 3))


def test_a_reduction_makes_the_step_slower_by_its_memory_traffic() -> None:
    from sim.job import Job
    from sim.simulate import simulate
    from topo.cluster_presets import get_cluster

    cluster = get_cluster("dgx-a100")
    plan = _plan("megatron-2021", tp=8, microbatch_size=4, global_batch=16)
    fused = simulate(Job(model=GPT, plan=dataclasses.replace(plan, bias_grad="epilogue"), cluster=cluster))
    reduced = simulate(Job(model=GPT, plan=plan, cluster=cluster))
    hbm = cluster.device.hbm_GBps * 1e9 * cluster.device.hbm_efficiency
    per_step = plan.num_microbatches * GPT.num_layers * layer_shape(GPT, plan).bias_grad_bytes / hbm
    slower = reduced.metrics.step_time_s - fused.metrics.step_time_s
    assert 0.5 * per_step < slower <= 1.5 * per_step
