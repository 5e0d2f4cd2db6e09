"""FP8 training: which GEMMs run in FP8, and the quantization work each recipe adds around them.

Under ``dtype="fp8"`` the three GEMMs of every linear layer an FP8 recipe quantizes (ops with a
``gemm_role``: the blocks' projections and MLPs, the experts' grouped GEMMs) run in FP8
(``Op.dtype = "fp8"``: the FP8 rate by shape, :mod:`topo.gemm_shape`); attention, norms,
activations, embeddings, the logits and an MoE router stay BF16 (TransformerEngine
``docs/.../introduction.rst``: "Linear operations: run in low precision. Attention computations:
run in high precision by default ... Other operations (layer normalization, softmax, etc.): run in
high precision"; torchtitan's float8 converter skips ``output``, ``filter_fqns``), and so do the
first and last ``fp8_bf16_layers`` blocks (NeMo's current-scaling recipe keeps 1 + 1,
``first_last_layers_bf16``).

Each quantization is a memory-bound kernel, an op of class "activation" before the GEMM that needs
it, named ``<gemm>.fp8_<kernel>_<operand>`` so that a trace's cast kernels can be set beside it.
Operands: ``x`` the forward's input (m x k), ``g`` the output gradient before the input-gradient
GEMM (m x n of the forward), ``w`` the weight (k x n). Bytes per element of each kernel
(:data:`RECIPES`), from torchao's own cost model (``torchao/testing/training/roofline_utils.py``
``get_tensor_memory_traffic_ovhd_s``) and TransformerEngine's recipe documents:

- ``delayed`` (TE ``DelayedScaling``: the scale comes from the amax history, "this reduces tensor
  reads per quantization from two to one"): one cast-transpose kernel, read BF16 (2) and write
  the rowwise and columnwise FP8 copies (1 + 1) = 4; an amax all-reduce of the stage's linears
  when each forward and backward ends (TE reduces "when the autocast context exits").
- ``tensorwise`` (dynamic/current per-tensor: torchao's default, TE ``Float8CurrentScaling``):
  an amax pass (read 2) and the cast-transpose (4); under torch.compile the amax is fused into the
  producing op (inductor kernels ``triton_red_fused_abs_max_mul_silu``), leaving 4.
- ``rowwise`` (torchao, CUTLASS rowwise GEMM): cast with a BF16 transpose (2 + 1 + 2) and a cast
  of the transpose (2 + 1) = 8; weights 10 per use.
- ``blockwise`` (DeepSeek-V3 1x128 activations, 128x128 weights; TE ``Float8BlockScaling``): the
  rowwise and columnwise 1x128 quantizations are made separately from BF16, 3 + 3; a 128x128
  weight is quantized once and its FP8 copy transposed, 3 + 2.
- ``mxfp8`` (Blackwell 1x32 blocks, TE ``MXFP8BlockScaling``): two independent quantizations from
  BF16, 3 + 3, for every operand ("rowwise and columnwise MXFP8 tensors are numerically different").

Weights (``fp8_weight_cast``): ``step`` casts once per step and caches the FP8 copy across
micro-batches (Megatron-Core sets TE's ``is_first_microbatch``), priced as 1/m of the cast in each
of the m micro-batches; ``microbatch`` casts in every micro-batch's forward (TE without that flag:
Composer's ``te.Linear``); ``use`` casts in the forward and again in the backward (torchao's
``Float8Linear``, which saves the BF16 weight). With ``fp8_param_gather`` the weight is cast on
its shard before the parameter all-gather (torchao ``enable_fsdp_float8_all_gather`` under FSDP,
Megatron ``--fp8-param-gather`` with the distributed optimizer): the cast bytes shrink by the
shard count, and the all-gather carries 1 byte per parameter (the data-parallel pass).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.groups import DP
from core.taskgraph import Op
from core.vocab import GemmRole, Kind, Lane, OpClass, Runtime
from schedules.plan import ParallelPlan

FP8 = "fp8"
AMAX_BYTES = 4  # one fp32 amax per quantized tensor
TENSORS_PER_GEMM_FORWARD = 3  # TE's forward amax history: input, weight, output per GEMM
TENSORS_PER_GEMM_BACKWARD = 2  # backward: the gradients
FPROP_ROLES = (GemmRole.FPROP, GemmRole.FPROP_NORMED)


@dataclass(frozen=True)
class Kernel:
    """One quantization kernel: a label, HBM bytes per element of its operand, and whether a
    producing kernel can absorb it (torch.compile fuses an amax pass into the op before it)."""

    label: str
    bytes_per_element: float
    fusable: bool = False


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What a recipe runs per linear layer (module docstring): kernels for an activation or
    output gradient (``activation``), a weight cast once for every use (``weight_cached``) or
    in the forward and the backward (``weight_forward``, ``weight_backward``), and whether an
    amax all-reduce ends each forward and backward (``amax_sync``)."""

    activation: tuple[Kernel, ...]
    weight_cached: tuple[Kernel, ...]
    weight_forward: tuple[Kernel, ...]
    weight_backward: tuple[Kernel, ...]
    amax_sync: bool = False


_CAST3 = Kernel("cast", 3.0)
RECIPES: dict[str, Recipe] = {
    "delayed": Recipe(activation=(Kernel("cast_transpose", 4.0),), weight_cached=(Kernel("cast_transpose", 4.0),),
                      weight_forward=(_CAST3,), weight_backward=(_CAST3,), amax_sync=True),
    "tensorwise": Recipe(activation=(Kernel("amax", 2.0, fusable=True), Kernel("cast_transpose", 4.0)),
                         weight_cached=(Kernel("amax", 2.0), Kernel("cast_transpose", 4.0)),
                         weight_forward=(Kernel("amax", 2.0), _CAST3), weight_backward=(_CAST3,)),
    "rowwise": Recipe(activation=(Kernel("cast_transpose", 5.0), _CAST3),
                      weight_cached=(_CAST3, Kernel("transpose", 4.0), _CAST3),
                      weight_forward=(_CAST3,), weight_backward=(Kernel("transpose", 4.0), _CAST3)),
    "blockwise": Recipe(activation=(_CAST3, Kernel("cast_columnwise", 3.0)),
                        weight_cached=(_CAST3, Kernel("transpose", 2.0)),
                        weight_forward=(_CAST3,), weight_backward=(_CAST3,)),
    "mxfp8": Recipe(activation=(_CAST3, Kernel("cast_columnwise", 3.0)),
                    weight_cached=(_CAST3, Kernel("cast_columnwise", 3.0)),
                    weight_forward=(_CAST3,), weight_backward=(Kernel("cast_columnwise", 3.0),)),
}


def fp8_work_key(plan: ParallelPlan) -> tuple[object, ...]:
    """What of the plan the FP8 pass's ops depend on (empty for a plan not in FP8): the recipe, the
    weight cast, the edge blocks, the FP8 gather's shard count and, for a cast cached per step,
    the micro-batches it is spread over."""
    if plan.dtype != FP8:
        return ()
    steps = plan.num_microbatches if plan.fp8_weight_cast == "step" else 0
    shard = plan.zero_shard if plan.fp8_param_gather and plan.zero >= 1 else 1
    return (plan.fp8_recipe, plan.fp8_weight_cast, plan.fp8_bf16_layers, shard, steps, plan.framework,
            plan.fused_elementwise)


def weight_copy_bytes(plan: ParallelPlan) -> float:
    """HBM bytes per parameter of the FP8 weight copies kept between uses: TE caches a weight's
    rowwise and columnwise FP8 copies (1 + 1) once cast for a step or a micro-batch, beside the
    BF16 weight ("FP8 weight caching", TE ``Linear`` ``is_first_microbatch``); none where the
    weights themselves are FP8 (``fp8_param_gather``), where each use casts afresh (torchao) or
    where ZeRO-3 frees the gathered weight after use. Counted over all of a rank's parameters
    (the unquantized embeddings, norms and head are a few percent of them)."""
    cached = plan.fp8_weight_cast in ("step", "microbatch")
    return 2.0 if plan.dtype == FP8 and cached and not plan.fp8_param_gather and plan.zero < 3 else 0.0


def in_fp8(plan: ParallelPlan, layer: int, num_layers: int) -> bool:
    """Whether block ``layer`` of ``num_layers`` runs its linears in FP8."""
    edge = plan.fp8_bf16_layers
    return plan.dtype == FP8 and edge <= layer < num_layers - edge


def quantize_layer(plan: ParallelPlan, ops: tuple[Op, ...], layer: int, num_layers: int) -> tuple[Op, ...]:
    """Block ``layer``'s ops with its quantized GEMMs in FP8 and their quantization kernels before
    them (unchanged when the block runs in BF16)."""
    if not in_fp8(plan, layer, num_layers):
        return ops
    out: list[Op] = []
    for op in ops:
        if op.gemm_role and op.op_class == OpClass.GEMM:
            out += _quantization_ops(plan, op)
            out.append(dataclasses.replace(op, dtype=FP8))
        else:
            out.append(op)
    return tuple(out)


def amax_sync_op(plan: ParallelPlan, kind: str, quantized_gemms: int, backward: bool) -> tuple[Op, ...]:
    """The delayed recipe's amax all-reduce at the end of a pass over ``quantized_gemms`` GEMMs
    (one fp32 amax per tensor: input, weight, output forward; two gradients backward), over the
    data-parallel group (Megatron-Core's amax group is TP x DP: the DP group stands for it)."""
    if plan.dtype != FP8 or not RECIPES[plan.fp8_recipe].amax_sync or quantized_gemms == 0:
        return ()
    per_gemm = TENSORS_PER_GEMM_BACKWARD if backward else TENSORS_PER_GEMM_FORWARD
    return (Op(Lane.DP, Kind.ALL_REDUCE, "fp8_amax_sync", OpClass.ALL_REDUCE,
               bytes=AMAX_BYTES * per_gemm * quantized_gemms, dim=DP),)


def _quantization_ops(plan: ParallelPlan, op: Op) -> list[Op]:
    """The kernels that quantize what ``op`` reads and nothing earlier quantized."""
    recipe = RECIPES[plan.fp8_recipe]
    weight = op.k * op.n * op.batch if op.gemm_role != GemmRole.DGRAD else op.n * op.k * op.batch
    if op.gemm_role in FPROP_ROLES:
        return (_casts(op, "x", _activation_kernels(plan, recipe, op.gemm_role), op.m * op.k * op.batch)
                + _casts(op, "w", _weight_kernels(plan, recipe, backward=False), weight * _weight_share(plan)))
    if op.gemm_role == GemmRole.DGRAD:
        return (_casts(op, "g", _activation_kernels(plan, recipe, op.gemm_role), op.m * op.k * op.batch)
                + _casts(op, "w", _weight_kernels(plan, recipe, backward=True), weight * _weight_share(plan)))
    return []  # wgrad: the columnwise copies of x and g were made with them


def _activation_kernels(plan: ParallelPlan, recipe: Recipe, role: str) -> tuple[Kernel, ...]:
    """An input's or output gradient's kernels: none for a normed input under TransformerEngine
    (``LayerNormLinear`` "the LayerNorm output is quantized directly, eliminating the separate
    quantization step"); the fusable ones dropped where torch.compile fuses them into the producer."""
    if role == GemmRole.FPROP_NORMED and plan.framework == Runtime.MEGATRON:
        return ()
    if plan.framework == Runtime.TORCH and plan.fused_elementwise:
        return tuple(k for k in recipe.activation if not k.fusable)
    return recipe.activation


def _weight_kernels(plan: ParallelPlan, recipe: Recipe, backward: bool) -> tuple[Kernel, ...]:
    """The weight's kernels in the forward (``backward`` False) or the backward."""
    if plan.fp8_weight_cast == "use":
        return recipe.weight_backward if backward else recipe.weight_forward
    return () if backward else recipe.weight_cached


def _weight_share(plan: ParallelPlan) -> float:
    """Share of a weight cast priced per micro-batch: 1/m when cached for the step, divided by the
    shard count when the cast runs on the shard before an FP8 all-gather."""
    share = 1.0 / plan.num_microbatches if plan.fp8_weight_cast == "step" else 1.0
    if plan.fp8_param_gather and plan.zero >= 1:
        share /= plan.zero_shard
    return share


def _casts(op: Op, operand: str, kernels: tuple[Kernel, ...], elements: float) -> list[Op]:
    return [Op(Lane.COMPUTE, op.kind, f"{op.name}.fp8_{k.label}_{operand}", OpClass.ACTIVATION,
               bytes=k.bytes_per_element * elements, layer=op.layer) for k in kernels if elements > 0]
