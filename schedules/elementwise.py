"""Memory passes of a block's element-wise pieces (norms, residual adds, activation functions,
dropout, RoPE), fused or eager, in elements of the tensor each piece works on: what
:mod:`schedules.layer_ops` prices as their HBM traffic.
"""

from __future__ import annotations

from schedules.plan import ParallelPlan

# Memory passes of one block's element-wise pieces, (forward, backward): reads + writes, in
# elements of the tensor each piece works on ([tokens, h] for norms, residual adds and dropout;
# [tokens, ffn/tp] for the activation function, counted on its output; q and k for RoPE).
# "fused": the kernels Megatron-LM / Transformer Engine run (a norm reads x and writes y, its
# backward reads dy and x and writes dx; SwiGLU reads gate and up and writes the product, its
# backward reads dout, gate and up and writes both gradients; a residual add reads two and
# writes one, and so does the sum of the two gradient flows where its branches meet; dropout
# backward reads dy and a 1-byte mask and writes dx; RoPE reads and writes q and k).
# "eager": PyTorch's composite ops and their autograd formulas, as the included trainer runs
# them (framework="torch"): F.rms_norm is pow (2), mean (1), mul by rstd (2) and by the weight
# (2) = 7 passes; backward: MulBackward0 x2 (input gradient 2 + weight/rstd gradient product and
# sum 4, each), MeanBackward1 (1), PowBackward0 (5) and the sum of the two gradients of x (3) = 21.
# silu(gate) * up: silu 2 + mul 3 = 5; backward MulBackward0 (two products, 3 each) and
# SiluBackward0 (3) = 9. RoPE as x1*cos - x2*sin and x1*sin + x2*cos over the two halves, then
# cat: 9 passes; backward: the four MulBackward0 (1 each), SubBackward0's negation (1), the
# sums of each half's two gradients (1.5 each) and the cat of the halves (2) = 10.
# LayerNorm, GELU and dropout are single native ops with native backward kernels in both.
ELEMENTWISE_PASSES: dict[str, dict[str, tuple[float, float]]] = {
    "fused": {"layernorm": (2, 3), "rmsnorm": (2, 3), "residual": (3, 3), "swiglu": (3, 5),
              "gelu": (2, 3), "dropout": (3, 2.5), "rope": (2, 2)},
    "eager": {"layernorm": (2, 3), "rmsnorm": (7, 21), "residual": (3, 3), "swiglu": (5, 9),
              "gelu": (2, 3), "dropout": (3, 2.5), "rope": (9, 10)},
}

# Of those passes, the ones PyTorch runs as TensorIterator's non-vectorized kernel because a
# 16-bit operand is broadcast or strided (:mod:`topo.strided_rate`), priced at the device's
# ``strided_efficiency`` when the activations are 16-bit (:func:`strided_passes`). "eager": the
# RMSNorm's multiply by its weight ([h] against [tokens, h]; forward it reads and writes, 2;
# backward the gradient times the weight, 2): torchtitan torchtitan/models/norms.py @ 1ea476e9f and
# 041336434 ``output = self._norm(x.float()).type_as(x); return output * self.weight``, as TraceLens's
# measured "mul bf16 [1024] * [16,559,1024]". Not RoPE: the eager stacks rotate in fp32 (torchtitan
# torchtitan/models/llama/model.py ``apply_rotary_emb`` @ 1ea476e9f: ``view_as_complex(xq.float()
# ...)`` times the broadcast ``freqs_cis``; the included trainer's ``apply_rope`` multiplies by fp32
# tables), whose 4-byte kernels keep the streaming rate. "fused": none (Transformer Engine's and
# Apex's norm and RoPE kernels read whole rows; Megatron-Core's SwiGLU is compiled,
# megatron/core/jit.py: ``jit_fuser = torch.compile`` from torch 2.2, one generated kernel a pass:
# tests/schedules/test_megatron_swiglu.py).
STRIDED_PASSES: dict[str, dict[str, tuple[float, float]]] = {
    "fused": {},
    "eager": {"rmsnorm": (2, 2)},
}
STRIDED_MAX_ELEMENT_BYTES = 2
"""Element size (bytes) up to which the strided passes are slower than streaming: 16-bit
activations (:mod:`topo.strided_rate`: 4-byte kernels of that kind keep the streaming rate)."""

OPMATH_BYTES = 4
"""Bytes of the fp32 "opmath" type eager RMSNorms compute in when the activations are 16-bit."""


def eager_rmsnorm_passes(element_bytes: int) -> tuple[float, float]:
    """Memory passes (in elements of ``element_bytes``) of an eager RMSNorm, (forward, backward).

    Every eager RMSNorm of the stacks modelled upcasts a 16-bit input to fp32, normalises, casts
    back and then scales by the weight: torchtitan's ``RMSNorm`` (models/norms.py,
    ``self._norm(x.float()).type_as(x) * self.weight``), fms-fsdp's ``LayerNormParameterized``
    (``use_high_precision_pow``), Hugging Face's ``LlamaRMSNorm`` (``hidden_states.to(torch.float32)``)
    and ATen's composite ``rms_norm`` ("upcast is needed for fp16 and bf16",
    aten/src/ATen/native/layer_norm.cpp ``rms_norm_composite``). Per element, with o = 4 bytes and
    e the activation's bytes (the aten ops autograd runs, counted by
    tests/schedules/test_eager_rmsnorm.py): forward x.float() (e + o), pow (2o), mean (o), mul by
    the rstd (2o), type_as (o + e), mul by the weight (2e) = 36 bytes at e = 2; backward the
    weight's MulBackward0 (6e), the two casts' ToCopyBackward0 (e + o each) and, in fp32, the
    rstd's MulBackward0 (6o), MeanBackward1 (o: a broadcast read and a write), PowBackward0 (7o:
    x.pow(1), times 2, times the gradient) and the sum of x's two gradients (3o) = 92 bytes.
    fp32 activations (the CPU trainer's F.rms_norm): :data:`ELEMENTWISE_PASSES`."""
    if element_bytes >= OPMATH_BYTES:
        return ELEMENTWISE_PASSES["eager"]["rmsnorm"]
    e, o = element_bytes, OPMATH_BYTES
    casts = 2 * (e + o)
    return (5 * o + 2 * e + casts) / e, (6 * e + 17 * o + casts) / e


def elementwise_passes(plan: ParallelPlan) -> dict[str, tuple[float, float]]:
    """:data:`ELEMENTWISE_PASSES` of the plan's kernels (``plan.fused_elementwise``), the eager
    RMSNorm's at the plan's activation size (:func:`eager_rmsnorm_passes`)."""
    if plan.fused_elementwise:
        return ELEMENTWISE_PASSES["fused"]
    return {**ELEMENTWISE_PASSES["eager"], "rmsnorm": eager_rmsnorm_passes(plan.element_bytes)}


def strided_passes(plan: ParallelPlan) -> dict[str, tuple[float, float]]:
    """:data:`STRIDED_PASSES` of the plan's kernels: none unless the activations are 16-bit."""
    if plan.element_bytes > STRIDED_MAX_ELEMENT_BYTES:
        return {}
    return STRIDED_PASSES["fused" if plan.fused_elementwise else "eager"]
