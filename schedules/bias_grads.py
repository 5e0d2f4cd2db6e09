"""The gradients of linear layers' biases: a reduction of each output gradient over the tokens,
run as a kernel of its own or computed by the weight-gradient GEMM.

A linear ``y = x W^T + b`` over ``tokens`` rows gets ``db = sum over the rows of dy``: every
element of ``dy`` ([tokens, outputs] in the activations' dtype) is read once more, unless the
GEMM that already reads ``dy`` for ``dW`` sums it in its epilogue.

- "reduction" (:attr:`schedules.plan.ParallelPlan.bias_grad`): PyTorch's own linears. Autograd
  runs ``addmm``'s bias gradient as the output gradient summed to the bias's shape (``sum_to``,
  an ``aten::sum`` over the token dimension: counted by
  tests/schedules/test_bias_grads.py under a dispatch mode); Megatron-LM's tensor-parallel
  linears (``LinearWithGradAccumulationAndAsyncCommunication.backward``, megatron/core/
  tensor_parallel/layers.py and the 2021-22 megatron/mpu/layers.py that Megatron-DeepSpeed
  forked) call ``grad_output.sum(dim=0)``, and the bias-GeLU and bias-dropout-add fusions
  return a full-size gradient for their bias that autograd sums the same way.
- "epilogue": Transformer Engine's ``Linear`` / ``LayerNormLinear`` / ``LayerNormMLP`` compute
  ``grad_bias`` in the weight-gradient GEMM (``wgrad, grad_bias, _ = gemm(..., grad=True,
  use_bias=ctx.use_bias)``: cuBLASLt's bias-gradient epilogue), and in FP8 in the gradient's
  cast-transpose (``fp8_cast_transpose_bgrad_fused``): no pass of its own.
- "auto": a reduction on the torch runtime (PyTorch's linears), except in FP8 plans, whose
  matmuls are taken as Transformer Engine's (torchao's ``Float8Linear`` adds its bias outside
  the matmul, whose gradient autograd would sum: not modelled; no shared row has both); the
  epilogue on the megatron runtime (Transformer Engine; the megatron-2021, megatron-2023 and
  deepspeed presets set "reduction").

What is counted: the biases of the attention's input and output projections and of a dense
MLP's two linears (GPT-style blocks, ``ModelSpec.bias``), on one (tp, cp) rank: the
column-parallel outputs (q, k, v, fc1) at their local width over all the rank's tokens, the
row-parallel ones (proj, fc2) at the full width over the tokens the bias is added to (1/tp of
them with sequence parallelism, after the reduce-scatter). MoE experts and MLA projections are
not counted (their stacks are Transformer Engine's). Priced as element-wise memory traffic
(``OpClass.ACTIVATION``, the device's streaming rate) in the weight-gradient pass.
"""

from __future__ import annotations

from core.vocab import Runtime
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan


def reduces_bias_grads(plan: ParallelPlan) -> bool:
    """Does each linear's bias gradient run as a reduction kernel of its own (``plan.bias_grad``,
    "auto" resolved as the module docstring says)?"""
    if plan.bias_grad != "auto":
        return plan.bias_grad == "reduction"
    return plan.framework == Runtime.TORCH and plan.dtype != "fp8"


def bias_grad_bytes(model: ModelSpec, plan: ParallelPlan, tokens: float) -> float:
    """HBM bytes one block's bias-gradient reductions read on one (tp, cp) rank per backward
    (``tokens``: the micro-batch's tokens on this CP rank); 0 without biases or where the GEMMs
    compute them."""
    if not model.bias or not reduces_bias_grads(plan):
        return 0.0
    tp, h = plan.tp, model.hidden_size
    column_width = (h + 2 * model.kv_size + model.ffn_inputs * model.ffn) / tp  # q, k, v and fc1, local
    row_tokens = tokens / tp if plan.sequence_parallel else tokens  # proj and fc2 add their bias after the reduction
    return plan.element_bytes * (tokens * column_width + row_tokens * 2 * h)
