"""Framework presets: the software a run used, as the plan choices that stack makes.

Runs of one model on one cluster differ by their training stack: whether attention is a fused
(flash) kernel, whether element-wise work is fused, when data-parallel gradients are reduced, how
finely ZeRO-3/FSDP gathers parameters, what "selective" recomputation recomputes, which Adam
kernel runs. A preset names those choices with the source of each; every one of them stays an
individual plan field (and flag) a user may override, and the default (``megatron-core``) is
what the simulator assumed before presets existed.

Runtimes (``ParallelPlan.framework``): "megatron" schedules pipelines as Megatron-LM does
(eager sends, DDP or the distributed optimizer); "torch" as PyTorch's own stack
(``torch.distributed.pipelining``, FSDP2 units per block: :mod:`schedules.passes.dp_torch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from core.errors import invalid, unknown_name
from core.settings import Declared, declared
from schedules.framework_sources import (
    DEEPSPEED_2021_SRC,
    DEEPSPEED_SRC,
    FSDP2_SRC,
    MEGATRON_2023_SRC,
    MEGATRON_CORE_SRC,
    TORCHTITAN_SRC,
)
from schedules.plan import CONCERNS

DEFAULT_FRAMEWORK = "megatron-core"


@dataclass(frozen=True, kw_only=True)
class FrameworkPreset:
    """The plan choices a training stack makes: values of plan settings (the fields of
    :data:`schedules.plan.CONCERNS`, each checked by its declared rule), each with its source.

    ``choices`` holds what the stack sets: the runtime (``framework``), attention and its kernel,
    when gradients are reduced and parameters gathered, fused or eager element-wise work and Adam,
    what ``recompute="selective"`` recomputes, what ZeRO-3 gathers at once, TP communication
    overlap, the reductions' dtype, activation offload's unit, FSDP resharding, its FP8 recipe and
    weight casts, pipeline P2P, the loss's dtype, and ``zero`` where the stack fixes it (the FSDP
    stacks' 3; a per-run choice elsewhere). A setting it leaves out keeps the plan's default.

    Attributes:
        name: the preset's name.
        choices: plan field -> the stack's value.
        sources: plan field -> where the choice is documented.
    """

    name: str
    choices: Mapping[str, Any]
    sources: Mapping[str, str]

    def __post_init__(self) -> None:
        fields = {d.name: d for d in _plan_settings()}
        for field, value in self.choices.items():
            if field not in fields:
                raise invalid(f"{self.name}.{field}", value, "not a plan setting")
            if not fields[field].rule.accepts(value):
                raise invalid(f"{self.name}.{field}", value, fields[field].rule.what)
            if not self.sources.get(field, "").strip():
                raise invalid(f"{self.name}.{field}", value, "a preset's choice needs its source")

    def plan_fields(self) -> dict[str, Any]:
        """The plan fields this preset sets."""
        return dict(self.choices)

    def value(self, field: str) -> Any:
        """The plan's ``field`` under this preset: its choice, else the plan's default."""
        return self.choices[field] if field in self.choices else next(
            d.default for d in _plan_settings() if d.name == field)


def _plan_settings() -> tuple[Declared, ...]:
    return tuple(d for concern in CONCERNS for d in declared(concern))


def preset(name: str, sources: Mapping[str, str], **choices: Any) -> FrameworkPreset:
    """The preset ``name`` of these plan choices."""
    return FrameworkPreset(name=name, choices=MappingProxyType(choices), sources=sources)


_DEEPSPEED: Mapping[str, Any] = MappingProxyType(dict(
    framework="megatron", flash_attention=False, overlap_grad_reduce=True, overlap_param_gather=True,
    elementwise="fused", optimizer="fused", selective_recompute="attention", zero3_unit="module",
    tp_comm_overlap=False, grad_reduce_dtype="compute", activation_offload_unit="layer", pipeline_p2p="blocking",
    bias_grad="reduction"))
"""The choices Megatron-DeepSpeed's stacks share (sources: :data:`DEEPSPEED_SRC`)."""
_FSDP: Mapping[str, Any] = MappingProxyType(dict(
    framework="torch", flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True,
    elementwise="eager", optimizer="foreach", zero3_unit="block", tp_comm_overlap=False, zero=3))
"""The choices the FSDP stacks share (sources: :data:`FSDP2_SRC`)."""


_PRESETS: dict[str, FrameworkPreset] = {p.name: p for p in (
    preset(name="megatron-core", framework="megatron", flash_attention=True, overlap_grad_reduce=True,
           overlap_param_gather=True, elementwise="fused", optimizer="fused",
           selective_recompute="attention", zero3_unit="block", tp_comm_overlap=True,
           grad_reduce_dtype="fp32", loss_allreduce=True, loss_nan_check=True, grad_nan_check=True,
           delay_grad_reduce=True, sources=MEGATRON_CORE_SRC),
    preset(name="nemo", framework="megatron", flash_attention=True, overlap_grad_reduce=True,
           overlap_param_gather=True, elementwise="fused", optimizer="fused",
           selective_recompute="attention", zero3_unit="block", tp_comm_overlap=True,
           grad_reduce_dtype="fp32", fp8_param_gather=True, loss_allreduce=False, loss_nan_check=False,
           timer_syncs=False, grad_nan_check=True, average_in_collective=True, delay_grad_reduce=True,
           zero=1, sequence_parallel=True,
           sources={**MEGATRON_CORE_SRC, "framework": "NeMo 2 trains with Megatron-Core",
                    "zero": "NeMo's recipes train with the distributed optimizer (ZeRO-1): "
                            "distributed_fused_adam_with_cosine_annealing sets use_distributed_optimizer=True "
                            "(nemo/collections/llm/recipes/optim/adam.py l.47), and Megatron-Bridge's recipes "
                            "cfg.ddp.use_distributed_optimizer = True (src/megatron/bridge/recipes/llama/h100/"
                            "llama3.py)",
                    "sequence_parallel": "Megatron-Bridge's performance scripts set sequence_parallel = tp > 1 "
                                         "(scripts/performance/utils/overrides.py l.478), as NeMo's recipes with "
                                         "TP do (llama3_70b.py, llama31_405b.py, gpt3_175b.py: "
                                         "sequence_parallelism=True); at TP 1 it changes nothing",
                    "fp8_recipe": "NeMo's bf16_with_fp8_mixed recipe: fp8_recipe 'delayed'; its performance "
                                  "scripts default to --fp8_recipe ds (per-tensor delayed) "
                                  "(nemo/collections/llm/recipes/precision/mixed_precision.py, "
                                  "scripts/performance/argument_parser.py)",
                    "fp8_param_gather": "NeMo's FP8 mixed-precision recipes set fp8_param_gather=True",
                    "loss_allreduce": "NeMo's MaskedTokenLossReduction all-reduces the loss once per step "
                                      "(reduce), not per micro-batch (nemo/lightning/megatron_parallel.py)",
                    "loss_nan_check": "MaskedTokenLossReduction checks isnan only in validation steps",
                    "grad_nan_check": "NeMo's recipes: DistributedDataParallelConfig(check_for_nan_in_grad=True) "
                                      "(nemo/collections/llm/recipes/llama3_8b.py and the others)",
                    "average_in_collective": "NeMo's recipes: DistributedDataParallelConfig(average_in_collective="
                                             "True) (nemo/collections/llm/recipes/llama3_8b.py, 28 recipes)",
                    "timer_syncs": "Megatron-Core timers at level 0 (no synchronize)"}),
    preset(name="megatron-2021", framework="megatron", flash_attention=False, overlap_grad_reduce=False,
           overlap_param_gather=False, elementwise="fused", optimizer="fused",
           selective_recompute="attention", zero3_unit="block", tp_comm_overlap=False,
           grad_reduce_dtype="compute", pipeline_p2p="blocking", loss_allreduce=True, timer_syncs=True,
           loss_nan_check=False, pipeline_scatter_gather=True, bias_grad="reduction", grad_accumulation="autograd",
           sources={**MEGATRON_CORE_SRC,
                    "grad_accumulation": "Megatron-LM 2021 (fda81a212b; the README's 152aab304d alike): the fp16 runs "
                                         "use the local DDP without contiguous buffers (--use-contiguous-buffers-in-ddp "
                                         "is store_true, forced only for bf16: megatron/arguments.py l.136-155, 579), "
                                         "so each micro-batch's weight gradients join param.grad through autograd's "
                                         "AccumulateGrad; gradient accumulation fusion arrived on 2022-02-16 "
                                         "(83b1e42f30). With bf16 the 2021 code adds each gradient into an fp32 "
                                         "main_grad in a hook (10 bytes per parameter per micro-batch), counted as "
                                         "autograd's: an approximation",
                    "bias_grad": "Megatron-LM 2021 megatron/mpu/layers.py (fda81a212b): ColumnParallelLinear runs "
                                 "F.linear with its bias (autograd sums the output gradient to the bias), the "
                                 "skip_bias_add linears' biases go through the bias-GeLU and bias-dropout-add "
                                 "fusions, whose full-size bias gradient autograd sums the same way",
                    "pipeline_scatter_gather": "Megatron-LM 2021 megatron/p2p_communication.py (fda81a212b) "
                                               "l.51-55, 71-77, 115-122: scatter_gather_tensors_in_pipeline, on "
                                               "by default since 72e4230bb5 (2021-02-16)",
                    "loss_allreduce": "Megatron-LM 2021 pretrain_gpt.py loss_func (fda81a212b): "
                                      "average_losses_across_data_parallel_group([loss]) in every micro-batch",
                    "loss_nan_check": "no NaN check in the 2021 loss_func",
                    "grad_nan_check": "no gradient NaN check before the 2021 reduction",
                    "average_in_collective": "Megatron-LM 2021 megatron/model/distributed.py allreduce_gradients "
                                             "(fda81a212b): buffer_.data /= the DP size, then the all-reduce",
                    "timer_syncs": "Megatron-LM 2021 megatron/global_vars.py _Timer.start/stop call "
                                   "torch.cuda.synchronize(); megatron/schedules.py times forward-compute and "
                                   "backward-compute around every micro-batch (fda81a212b)",
                    "tp_comm_overlap": "no TP communication overlap in 2021",
                    "grad_reduce_dtype": "the 2021 runs are fp16, whose gradients Megatron-LM "
                                        "all-reduces in fp16 (accumulate_allreduce_grads_in_fp32 "
                                        "is forced for bf16 only)",
                    "flash_attention": "Megatron-LM 2021 computes attention as batched matmuls "
                                       "with a fused scale-mask-softmax kernel (no flash attention, "
                                       "published 2022)",
                    "overlap_grad_reduce": "Megatron-LM 2021 DDP all-reduces the gradients after "
                                           "the backward pass (no overlap until the 2023 grad buffer)",
                    "overlap_param_gather": "no distributed optimizer in 2021",
                    "pipeline_p2p": "Megatron-LM 2021 megatron/p2p_communication.py (fda81a212b): every "
                                    "send/receive is batch_isend_irecv, waited, then torch.cuda.synchronize()"}),
    preset(name="megatron-2023", framework="megatron", flash_attention=False, overlap_grad_reduce=False,
           overlap_param_gather=False, elementwise="fused", optimizer="fused",
           selective_recompute="attention", zero3_unit="block", tp_comm_overlap=False,
           grad_reduce_dtype="fp32", pipeline_p2p="blocking", loss_allreduce=True, loss_nan_check=False,
           timer_syncs=False, pipeline_scatter_gather=True, bias_grad="reduction",
           sources={**MEGATRON_CORE_SRC, **MEGATRON_2023_SRC}),
    preset(name="deepspeed", sources=DEEPSPEED_SRC, **_DEEPSPEED),
    preset(name="deepspeed-2021", sources=DEEPSPEED_2021_SRC, **_DEEPSPEED, zero3_gather="per-param"),
    preset(name="fsdp2", **_FSDP, selective_recompute="alternate-matmul",
           grad_reduce_dtype="compute", fsdp_reshard_after_forward="non-root", fp8_recipe="tensorwise",
           fp8_weight_cast="use", activation_layout="bsh-view",
           sources={**FSDP2_SRC,
                    "activation_layout": "tensor parallelism with FSDP2 is DTensor's parallelize_module on [batch, "
                                         "seq, hidden] activations (sequence parallelism shards dim 1, as torchtitan "
                                         "and the included trainer do); today's PyTorch gathers one sequence on dim 1 "
                                         "as a view (#169404, 2025-12) and still copies a reduce-scatter's input "
                                         "(torch/distributed/_functional_collectives.py)"}),
    preset(name="torchtitan", sources=TORCHTITAN_SRC, **_FSDP, selective_recompute="alternate-matmul",
           grad_reduce_dtype="fp32", fsdp_reshard_after_forward="torchtitan", fp8_recipe="tensorwise",
           fp8_weight_cast="use", sequence_parallel=True, activation_layout="bsh"),
    preset(name="llm-foundry", **_FSDP, selective_recompute="attention", grad_reduce_dtype="fp32",
           attention_kernel="triton", fsdp_reshard_after_forward="non-root",
           fp8_recipe="delayed", fp8_weight_cast="microbatch", loss_dtype="compute",
           sources={**FSDP2_SRC,
                    "zero": "Composer's FSDP sharding_strategy defaults to FULL_SHARD "
                            "(llm-foundry's yamls: fsdp_config sharding_strategy: FULL_SHARD)",
                    "framework": "Composer FSDP (FULL_SHARD) wrapping each MPT block",
                    "flash_attention": "llm-foundry attn_impl 'triton'/'flash' fused attention",
                    "attention_kernel": "llm-foundry's published benchmarks "
                                        "(scripts/train/benchmarking/submit_benchmarks.py) override "
                                        "attn_impl to 'triton' (its Triton FlashAttention kernel)",
                    "selective_recompute": "activation_checkpointing per block only (no selective mode)",
                    "fp8_recipe": "Composer precision amp_fp8 runs TE te.Linear under DelayedScaling("
                                  "fp8_format=HYBRID, amax_history_len=16, amax_compute_algo='max') "
                                  "(composer/core/precision.py)",
                    "fp8_weight_cast": "Composer calls te.Linear without is_first_microbatch, so TE casts "
                                       "each weight in every micro-batch's forward",
                    "loss_dtype": "ComposerMPTCausalLM defaults loss_fn to 'fused_crossentropy', flash-attn's "
                                  "CrossEntropyLoss kernel on the bf16 logits (no fp32 copy; "
                                  "llmfoundry/models/mpt/modeling_mpt.py)",
                    "grad_reduce_dtype": "Composer's default FSDP mixed_precision 'DEFAULT' sets "
                                        "reduce_dtype=float32 (composer get_mixed_precision; "
                                        "'PURE' reduces in the compute dtype)"}),
)}
FRAMEWORK_PRESETS: Mapping[str, FrameworkPreset] = MappingProxyType(_PRESETS)


def get_framework(name: str) -> FrameworkPreset:
    """The preset called ``name``; the error lists the valid names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("framework", name, _PRESETS) from None
