"""The plan's precision: the matmuls' dtype, FP8 recipes, master weights, the loss's and the
gradient reductions' dtypes.

Attributes of :class:`Precision`:
    dtype: compute dtype of the matmuls: bf16 | fp8 | fp32 (fp32: activations, gradients and
        parameters travel in 4-byte floats, as the included trainer runs on CPUs).
    master_weights: the optimizer updates fp32 master copies of the parameters with fp32
        Adam states (Megatron, DeepSpeed, torchtitan's fp32 FSDP shards, the included
        trainer). False (torch runtime only): the parameters are stored in the compute dtype
        and are the optimizer's copy, and its states follow their dtype: NeMo AutoModel casts
        the model to bf16 (``initialize_weights`` -> ``self.to(bf16)``) and steps it with
        ``torch.optim.Adam``, whose ``exp_avg``/``exp_avg_sq`` are ``zeros_like(param)``.
    loss_dtype: the dtype the loss's softmax runs in: "fp32" (the logits are upcast: torch's
        ``logits.float()`` in torchtitan and the included trainer, Megatron's cross entropy)
        or "compute" (torch runtime only: ``F.cross_entropy`` on the bf16 logits, NeMo
        AutoModel's ``MaskedCrossEntropy(fp32_upcast=False)``).
    grad_reduce_dtype: what data-parallel gradient reductions carry: "fp32" (4 bytes per
        gradient: Megatron-LM with bf16, FSDP with ``reduce_dtype=fp32``), "compute" (the
        compute dtype) or "auto" (fp32 for the megatron runtime in bf16, else compute).
    fp8_recipe: with ``dtype="fp8"``, how tensors are scaled and quantized: "delayed" (TE
        delayed scaling), "tensorwise" (dynamic per-tensor: torchao, TE current scaling),
        "rowwise" (torchao), "blockwise" (DeepSeek-V3 1x128/128x128), "mxfp8" (Blackwell).
    fp8_weight_cast: when the FP8 weight copy is made: once per "step" (cached across
        micro-batches), every "microbatch", or at every "use" (forward and backward).
    fp8_param_gather: ZeRO/FSDP all-gather the parameters in FP8 (torchao float8 all-gather,
        Megatron ``--fp8-param-gather``).
    fp8_bf16_layers: the first and the last this many blocks stay BF16.
See :mod:`schedules.fp8` for the mechanics.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid
from core.settings import BOOLEAN, check_declared, choice, integer, setting

DTYPES = ("bf16", "fp8", "fp32")
LOSS_DTYPES = ("fp32", "compute")
GRAD_REDUCE_DTYPES = ("auto", "fp32", "compute")
FP8_RECIPES = ("delayed", "tensorwise", "rowwise", "blockwise", "mxfp8")
FP8_WEIGHT_CASTS = ("step", "microbatch", "use")


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Dtypes of the compute, the states, the loss and the reductions (see the module docstring)."""

    dtype: str = setting("bf16", rule=choice(DTYPES), help="matmul dtype (fp32: the included trainer on CPUs)")
    master_weights: bool = setting(True, rule=BOOLEAN,
                                   help="the optimizer steps fp32 master weights with fp32 Adam states (default on; "
                                        "--no-master-weights: bf16 parameters and states, torch runtime, as NeMo "
                                        "AutoModel)")
    loss_dtype: str = setting("fp32", rule=choice(LOSS_DTYPES),
                              help="the loss's softmax in fp32 (default) or the compute dtype (torch runtime, as "
                                   "NeMo AutoModel's fp32_upcast: false)")
    grad_reduce_dtype: str = setting("auto", rule=choice(GRAD_REDUCE_DTYPES),
                                     help="dtype of DP gradient reductions (auto: fp32 for the megatron runtime in "
                                          "bf16)")
    fp8_recipe: str = setting("delayed", rule=choice(FP8_RECIPES),
                              help="with --dtype fp8: delayed (TE delayed scaling), tensorwise (dynamic per-tensor: "
                                   "torchao, TE current scaling), rowwise (torchao), blockwise (DeepSeek-V3 "
                                   "1x128/128x128), mxfp8 (Blackwell); default: the --framework's",
                              source="Megatron-Core TransformerConfig fp8_recipe defaults to 'delayed'")
    fp8_weight_cast: str = setting("step", rule=choice(FP8_WEIGHT_CASTS),
                                   help="with --dtype fp8: cast weights once per step (cached), every micro-batch, "
                                        "or at every use")
    fp8_param_gather: bool = setting(False, rule=BOOLEAN, help="with --dtype fp8: ZeRO/FSDP parameter all-gathers "
                                     "in FP8")
    fp8_bf16_layers: int = setting(0, rule=integer(0, 100_000), metavar="N",
                                   help="with --dtype fp8: the first and last N blocks stay BF16 (default 0)")

    def __post_init__(self) -> None:
        check_declared(self, invalid)

    @property
    def compute_dtype(self) -> str:
        """The dtype everything but an FP8 plan's quantized GEMMs computes in: bf16 under fp8
        (attention, norms, activations, the logits stay bf16: :mod:`schedules.fp8`), else ``dtype``."""
        return "bf16" if self.dtype == "fp8" else self.dtype

    @property
    def element_bytes(self) -> int:
        """Bytes of one activation, gradient or communicated parameter element (4 for fp32, else 2)."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def param_gather_bytes(self) -> int:
        """Bytes per parameter a ZeRO/FSDP parameter all-gather carries: 1 when an FP8 plan gathers
        FP8 parameters (``fp8_param_gather``), else :attr:`element_bytes`."""
        return 1 if self.dtype == "fp8" and self.fp8_param_gather else self.element_bytes

    @property
    def loss_element_bytes(self) -> int:
        """Bytes of one logit element as the loss's softmax reads it (``loss_dtype``)."""
        return 4 if self.loss_dtype == "fp32" else self.element_bytes
