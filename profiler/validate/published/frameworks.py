"""Which framework preset (:mod:`schedules.frameworks`) a published run used, and what its source
states beyond the preset.

Each entry is matched by a lowercase substring of the row's ``framework`` text (first match wins)
and names the preset whose plan choices the run gets, the plan fields its runs set differently
(with the source), Megatron's vocabulary padding, and what its logged peak memory is. Unknown
frameworks get the default preset (noted as assumed). A DeepSpeed row whose text names a version
below 0.6 or the year 2021 runs the ``deepspeed-2021`` preset (:data:`DEEPSPEED_2021`): ZeRO-3's
coordinator was rewritten in v0.6.0 (2022-03-07), after the per-parameter code of v0.3.13-v0.5.x.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from profiler.validate.published.notes import Note
from schedules.frameworks import DEFAULT_FRAMEWORK, get_framework


@dataclass(frozen=True)
class Framework:
    """A published run's training stack.

    Attributes:
        key: lowercase substring of the row's ``framework`` text.
        preset: the :mod:`schedules.frameworks` preset whose plan choices the run gets.
        overrides: plan fields these runs set differently from the preset, as ``source`` says.
        model_overrides: model fields the stack's models set differently from the row's FFN-kind
            style (:data:`profiler.validate.published.jobs.LLAMA_STYLE` or GPT's defaults).
        vocab_multiple_per_tp: the vocabulary is padded to a multiple of this times TP (None: as given).
        memory_kind: what the framework's logged peak memory is ("reserved"/"allocated"), if known.
        selective_variants: a word of the row's ``recompute`` text -> the approximation when its
            selective recompute is not the preset's.
        assumed: framework settings the sources leave unstated.
        source: where the overrides are documented.
    """

    key: str
    preset: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    model_overrides: Mapping[str, Any] = field(default_factory=dict)
    vocab_multiple_per_tp: int | None = None
    memory_kind: str | None = None
    selective_variants: Mapping[str, Note] = field(default_factory=dict)
    assumed: tuple[Note, ...] = ()
    source: str = ""

    def plan_fields(self) -> dict[str, Any]:
        """The plan fields of the preset with this stack's overrides."""
        return {**get_framework(self.preset).plan_fields(), **self.overrides}


# Megatron-LM pads the vocabulary to a multiple of --make-vocab-size-divisible-by (128) x TP
# (megatron/training/tokenizer: _vocab_size_with_padding); Megatron-DeepSpeed inherits it.
MEGATRON_PAD = 128
SAC_LAYER = Note("sac-layer", "torchtitan per-layer selective AC (every k-th block recomputed) run as its "
                              "per-op SAC (every second matmul and the element-wise work recomputed)")
# NeMo AutoModel (nemo_automodel @ 01926a5c443b7979463c73341bf64adf79de638e, the commit of its
# performance table) trains with PyTorch's own runtime: FSDP2 fully_shard per transformer block,
# the embedding, the head and the model (components/moe/parallelizer.py apply_fsdp), under
# torch.distributed.pipelining (components/distributed/pipelining/autopipeline.py, functional.py):
# the simulator's "torch" runtime (schedules/passes/dp_torch.py, p2p_torch.py).
AUTOMODEL_OVERRIDES: Mapping[str, Any] = MappingProxyType({
    "moe_dispatcher": "deepep",  # benchmark configs: backend enable_deepep: true; the table: "TE + DeepEP"
    # apply_fsdp: MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    "grad_reduce_dtype": "fp32",
    # BackendConfig rms_norm: te (TE RMSNorm) and the experts' fused activations
    # (moe/layers.py: weighted_bias_swiglu_impl, the torch.compile'd quick_geglu_deepep)
    "elementwise": "fused",
    # bf16 parameters, no fp32 master copy: Checkpointer.initialize_model_weights calls the model's
    # initialize_weights(), whose default dtype=torch.bfloat16 ends in self.to(dtype)
    # (components/checkpoint/checkpointing.py, models/*/model.py initialize_weights); the benchmark
    # configs' optimizer is torch.optim.Adam, whose states are zeros_like(param) (bf16)
    "master_weights": False,
    # the benchmark configs' loss: MaskedCrossEntropy with fp32_upcast: false (components/loss/
    # masked_ce.py: logits.float() only when fp32_upcast), so F.cross_entropy runs on bf16 logits
    "loss_dtype": "compute",
    # FSDP's hooks reduce in every micro-batch's backward, under PP too: the table was measured at
    # 89e3a9fd (2025-10-06), where apply_fsdp shards model.model (not the causal-LM module), so
    # torch.distributed.pipelining's stage (its submod the causal-LM module, not an FSDPModule)
    # runs a "regular backward" (stage.py backward_maybe_with_nosync), and without PP get_sync_ctx
    # (components/distributed/utils.py) sets requires_gradient_sync only on an FSDPModule; the
    # MoEFSDPSyncMixin that defers the sync for these models came on 2025-10-08 (2c236e081)
    "grad_sync": "every-microbatch",
})
AUTOMODEL_SOURCE = ("NeMo AutoModel @ 01926a5c: FSDP2 fully_shard per block, embedding, head and model "
                    "(components/moe/parallelizer.py apply_fsdp, reduce_dtype float32) under "
                    "torch.distributed.pipelining (components/distributed/pipelining), the optimizer "
                    "torch.optim.Adam (examples/benchmark/configs), DeepEP dispatch (backend "
                    "enable_deepep: true), TE RMSNorm; FSDP's hooks reduce in every micro-batch's backward, "
                    "with and without PP, as at the table's measurement commit 89e3a9fd (the stage and "
                    "get_sync_ctx see the causal-LM module, not an FSDPModule)")
# DeepSpeed's BF16_Optimizer (bf16 with ZeRO stage 0 in the DeepSpeed config; it shards the fp32
# states itself, ZeRO-1): every backward's bf16 gradients are cast and added into fp32 buffers
# (update_hp_grads), which the data-parallel reduction then carries (get_grads_for_reduction).
BF16_OPTIMIZER: Mapping[str, Any] = MappingProxyType({"grad_accumulation": "fp32-copy", "grad_reduce_dtype": "fp32",
                                                      "zero1_grad_reduction": "all-reduce"})
BF16_OPTIMIZER_SOURCE = ("DeepSpeed BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py @v0.6.5): update_hp_grads "
                         "casts each bf16 gradient to fp32 and adds it into the fp32 buffer after every backward "
                         "(l.390-407; pipe/engine.py _exec_backward_pass l.778-780), and the pipeline engine "
                         "all-reduces those fp32 buffers whole (_bf16_reduce_grads, get_grads_for_reduction, "
                         "buffered_allreduce_fallback), not a reduce-scatter")
FRAMEWORKS: tuple[Framework, ...] = (
    Framework("megatron-bridge", "nemo", vocab_multiple_per_tp=MEGATRON_PAD,
              source="Megatron-Bridge trains with Megatron-Core (its performance recipes: "
                     "scripts/performance); matched before 'megatron-core', which its rows also name"),
    Framework("megatron-core", "megatron-core", vocab_multiple_per_tp=MEGATRON_PAD),
    Framework("automodel", "fsdp2", overrides=AUTOMODEL_OVERRIDES, source=AUTOMODEL_SOURCE,
              assumed=(Note("automodel-kernels", "NeMo AutoModel's TE norms and fused expert activations priced "
                                                 "as fused element-wise kernels (its residual adds, RoPE and "
                                                 "the shared experts' SiLU-and-multiply are eager)"),)),
    Framework("megatron-lm (2021", "megatron-2021", vocab_multiple_per_tp=MEGATRON_PAD),
    Framework("bigscience", "deepspeed", vocab_multiple_per_tp=MEGATRON_PAD,
              overrides=MappingProxyType({"overlap_grad_reduce": False, "overlap_param_gather": False,
                                          **BF16_OPTIMIZER}),
              source="BLOOM ran DeepSpeed's PipelineEngine, which reduces gradients after the schedule "
                     "(ReduceGrads instruction), and the BF16_Optimizer's ZeRO-1, which all-gathers the "
                     "updated parameters inside the optimizer step; " + BF16_OPTIMIZER_SOURCE),
    Framework("bf16_optimizer", "deepspeed", vocab_multiple_per_tp=MEGATRON_PAD, overrides=BF16_OPTIMIZER,
              source=BF16_OPTIMIZER_SOURCE),
    Framework("deepspeed", "deepspeed", vocab_multiple_per_tp=MEGATRON_PAD),
    Framework("torchtitan", "torchtitan", memory_kind="reserved",
              selective_variants=MappingProxyType({"layer": SAC_LAYER}),
              source="torchtitan logs memory as torch.cuda reserved_bytes.all.peak (metrics.py "
                     "DeviceMemoryMonitor, the 'memory' of its step log)"),
    # MPT trains without dropout: MPTConfig's resid_pdrop and emb_pdrop default to 0.0 and
    # attn_config's attn_pdrop to 0.0 (llmfoundry/models/mpt/configuration_mpt.py,
    # models/layers/blocks.py attn_config_defaults), and the pretrain yamls set none; torch's
    # dropout with p = 0 returns its input (no mask kept).
    Framework("llm-foundry", "llm-foundry", model_overrides=MappingProxyType({"dropout": False}),
              source="MPT's dropout probabilities default to 0.0 (configuration_mpt.py)"),
    Framework("fms-fsdp", "fsdp2"),
    # last: "Megatron-Bridge (Megatron-Core), NeMo 26.02" and "NeMo AutoModel" match their entries above first
    Framework("nemo", "nemo", vocab_multiple_per_tp=MEGATRON_PAD,
              source="NeMo 24.07 trains with Megatron-Core: NeMo-Framework-Launcher's configs set mcore_gpt "
                     "(launcher_scripts/conf/training/llama/llama3_70b.yaml), NeMo 2 its GPTConfig "
                     "(nemo/collections/llm/gpt/model/base.py)"),
    # after every named stack that runs FSDP (torchtitan, llm-foundry, fms-fsdp, AutoModel) or names it
    # for its own sharding (Megatron-FSDP under Megatron-Bridge / Megatron-Core, matched above)
    Framework("fsdp", "fsdp2",
              source="a stack named only as PyTorch FSDP trains on PyTorch's own runtime (FSDP's hooks, "
                     "eager element-wise kernels, torch's AdamW): the fsdp2 preset (FSDP1's flat-parameter "
                     "all-gathers priced as FSDP2's per-block ones)",
              assumed=(Note("fsdp-stack", "PyTorch FSDP without a named stack: the fsdp2 preset"),)),
)
MEGATRON_LM_2021 = Framework("megatron-lm", "megatron-2021", vocab_multiple_per_tp=MEGATRON_PAD)
MEGATRON_LM_2023 = Framework("megatron-lm", "megatron-2023", vocab_multiple_per_tp=MEGATRON_PAD,
                             source="Megatron-LM of 2023 (285068c8, schedules.FrameworkPreset megatron-2023)")
_YEAR = re.compile(r"\b(20[12]\d)\b")
DEEPSPEED_2021 = Framework("deepspeed", "deepspeed-2021", vocab_multiple_per_tp=MEGATRON_PAD,
                           source="DeepSpeed before v0.6.0 (2021): ZeRO-3's per-parameter collectives "
                                  "(deepspeed/runtime/zero/stage3.py, partition_parameters.py @v0.5.0)")
_DEEPSPEED_VERSION = re.compile(r"deepspeed[^0-9]{0,3}v?(\d+)\.(\d+)")
DEFAULT = Framework("", DEFAULT_FRAMEWORK,
                    assumed=(Note("framework", f"framework not in the table: the {DEFAULT_FRAMEWORK} preset"),))


def framework_for(text: str) -> Framework:
    """The first table entry whose key is in ``text`` (case-insensitive), else :data:`DEFAULT`;
    DeepSpeed of 2021 (:func:`deepspeed_2021`) instead of the DeepSpeed entry."""
    lowered = text.lower()
    found = next((f for f in FRAMEWORKS if f.key in lowered), DEFAULT)
    if found is DEFAULT and "megatron-lm" in lowered:
        return megatron_lm_by_year(lowered)
    return DEEPSPEED_2021 if found.key == "deepspeed" and deepspeed_2021(lowered) else found


def megatron_lm_by_year(text: str) -> Framework:
    """Megatron-LM named with a year and no Megatron-Core: the code of that time. Up to 2022 the
    ``megatron-2021`` preset (its timers synchronized until 77efcccb93, 2022-08-10, the code of the
    2021-22 papers), in 2023 ``megatron-2023`` (Megatron-LM at 285068c8, before Megatron-Core's
    schedules), later or without a year the default preset (Megatron-Core)."""
    years = [int(y) for y in _YEAR.findall(text)]
    if not years:
        return DEFAULT
    year = max(years)
    if year <= 2022:
        return MEGATRON_LM_2021
    return MEGATRON_LM_2023 if year == 2023 else DEFAULT


def deepspeed_2021(text: str) -> bool:
    """Does ``text`` name DeepSpeed of 2021: a version below 0.6 ("DeepSpeed 0.5.4", "deepspeed
    v0.3.16"), or, without a version, the year 2021?"""
    lowered = text.lower()
    if "deepspeed" not in lowered:
        return False
    version = _DEEPSPEED_VERSION.search(lowered)
    if version is not None:
        return (int(version[1]), int(version[2])) < (0, 6)
    return "2021" in lowered
