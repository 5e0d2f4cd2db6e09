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
    FSDP2_PRESET_SRC,
    LLM_FOUNDRY_SRC,
    MEGATRON_2021_SRC,
    MEGATRON_2023_SRC,
    MEGATRON_CORE_SRC,
    NEMO_SRC,
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
    pipeline_scatter_gather=True, bias_grad="reduction"))
"""The choices Megatron-DeepSpeed's stacks share (sources: :data:`schedules.framework_sources.DEEPSPEED_SRC`)."""
_FSDP: Mapping[str, Any] = MappingProxyType(dict(
    framework="torch", flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True,
    elementwise="eager", optimizer="foreach", zero3_unit="block", tp_comm_overlap=False, zero=3))
"""The choices the FSDP stacks share (sources: :data:`schedules.framework_sources.FSDP2_SRC`)."""


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
           sources=NEMO_SRC),
    preset(name="megatron-2021", framework="megatron", flash_attention=False, overlap_grad_reduce=False,
           overlap_param_gather=False, elementwise="fused", optimizer="fused",
           selective_recompute="attention", zero3_unit="block", tp_comm_overlap=False,
           grad_reduce_dtype="compute", pipeline_p2p="blocking", loss_allreduce=True, timer_syncs=True,
           loss_nan_check=False, pipeline_scatter_gather=True, bias_grad="reduction", grad_accumulation="autograd",
           sources=MEGATRON_2021_SRC),
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
           sources=FSDP2_PRESET_SRC),
    preset(name="torchtitan", sources=TORCHTITAN_SRC, **_FSDP, selective_recompute="alternate-matmul",
           grad_reduce_dtype="fp32", fsdp_reshard_after_forward="torchtitan", fp8_recipe="tensorwise",
           fp8_weight_cast="use", sequence_parallel=True, activation_layout="bsh"),
    preset(name="llm-foundry", **_FSDP, selective_recompute="attention", grad_reduce_dtype="fp32",
           attention_kernel="triton", fsdp_reshard_after_forward="non-root",
           fp8_recipe="delayed", fp8_weight_cast="microbatch", loss_dtype="compute",
           sources=LLM_FOUNDRY_SRC),
)}
FRAMEWORK_PRESETS: Mapping[str, FrameworkPreset] = MappingProxyType(_PRESETS)


def get_framework(name: str) -> FrameworkPreset:
    """The preset called ``name``; the error lists the valid names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("framework", name, _PRESETS) from None
