"""A published row -> the simulator's Job, with what it assumed and approximated, or the reason it
cannot be expressed.

Model: the row's dimensions; the architecture's details follow its FFN kind (SwiGLU: Llama style,
RMSNorm, RoPE, no biases, no dropout; GeLU: GPT style, LayerNorm, learned positions, biases,
dropout: :class:`schedules.model.ModelSpec`'s defaults). Plan: the row's degrees and batch, its
framework's preset (:mod:`profiler.validate.published.frameworks`) and what the row states beyond
it: async TP (``tp_comm_overlap``), ``torch.compile`` (element-wise work fused: an approximation).
Cluster:
:mod:`profiler.validate.published.hardware`. Unstated settings take these documented defaults
(each listed in the row's ``assumed``): micro-batch 1 (when the batch per data-parallel rank is
stated, :mod:`profiler.validate.published.tuning` then picks the fastest micro-batch size that fits,
as the benchmark's authors tuned it), one gradient-accumulation step when neither
the global batch nor the accumulation is stated, recompute none, bf16, vpp 1, sequence
parallelism off, vocabulary 50,257 (GPT-2 BPE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.validate.published.frameworks import Framework, framework_for
from profiler.validate.published.hardware import cluster_for
from profiler.validate.published.moe import moe_model, moe_plan_fields
from profiler.validate.published.notes import Note, Unexpressible
from profiler.validate.published.rows import PublishedRow
from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.plan.runtime import RECOMPUTE_KINDS
from sim.explore.spec import MICROBATCH_SIZES
from sim.job import Job

LEAST_MEMORY_FIRST = tuple(reversed(RECOMPUTE_KINDS))
"""Recompute modes a ratio-only row is tried at, the least activation memory first: when none fits
HBM, the tuning reports the first tried (:func:`sim.microbatch_tuning.fastest_fitting`), the one
nearest to fitting, not the one that needs the most."""
DEFAULT_VOCAB = 50257  # GPT-2 BPE, the Megatron-LM / DeepSpeed GPT examples' tokenizer
LLAMA_STYLE: dict[str, Any] = dict(norm="rmsnorm", position_embedding="rope", bias=False, dropout=False)
GPT_STYLE: dict[str, Any] = dict(tied_embeddings=True)
"""What a GPT-style (GeLU) row's architecture has that the ModelSpec defaults do not: the output
projection shares the word embedding, the default of every GPT-style code a row here names:
Megatron-Core ``pretrain_gpt.py`` l.87 ``share_embeddings_and_output_weights=not
args.untie_embeddings_and_output_weights`` (``--untie-embeddings-and-output-weights`` is store_true,
core_v0.8.0 arguments.py l.822; Megatron-LM 2021 and Megatron-DeepSpeed's GPT tie always), NeMo's
GPT config (``share_embeddings_and_output_weights`` true), llm-foundry's ``MPTConfig``
(``tie_word_embeddings: bool = True``, llmfoundry/models/mpt/configuration_mpt.py) and BLOOM
(Megatron-DeepSpeed's ``TiedLayerSpec`` embedding). Llama-style (SwiGLU) rows keep their own head."""
HYBRID_WORDS = ("hybrid", "hsdp")  # how a row's zero_note states hybrid sharding (FSDP HYBRID_SHARD)
NODE_SHARD_WORDS = ("inside node", "inside a node", "within node", "within a node", "intra-node")


@dataclass(frozen=True)
class RowJob:
    """A row's simulation job and what it took for granted."""

    job: Job
    assumed: tuple[Note, ...]
    approx: tuple[Note, ...]
    framework: Framework
    microbatch_choices: tuple[int, ...] = ()
    """Micro-batch sizes to try when the row leaves it unstated (empty: stated, or not tunable)."""
    fixed_batch: bool = True
    """The row states its batch (the tuned micro-batch size divides it); False: one micro-batch
    per step, so the global batch follows the micro-batch size."""
    recompute_choices: tuple[str, ...] = ()
    """Recompute modes to try when a ``ratio_only`` row leaves activation checkpointing unstated
    (its source tuned batch and checkpointing per twin: :mod:`profiler.validate.published.tuning`)."""
    pipeline_runs: int = 1
    """The step runs the pipeline schedule this many times, each over 1/runs of ``job``'s
    micro-batches, then the optimizer once (NeMo AutoModel's gradient accumulation: one
    ``schedule.step`` per local batch); simulated as that many steps of 1/runs of the batch."""


COMPOSER_PURE = "mixed_precision mode PURE"
"""How a row's notes state Composer's FSDP mixed precision 'PURE' (param, reduce and buffer dtypes all
the compute dtype; the llm-foundry preset's 'DEFAULT' reduces in fp32)."""


def job_for_row(row: PublishedRow) -> RowJob:
    """The Job simulating ``row``; Unexpressible (every reason, one line) when it cannot."""
    reasons = _reasons(row)
    if reasons:
        raise Unexpressible("; ".join(reasons))
    assumed: list[Note] = []
    approx: list[Note] = []
    framework = framework_for(row.framework)
    assumed += framework.assumed
    cluster, cluster_assumed, cluster_approx = cluster_for(row)
    model = _model(row, framework, assumed, approx)
    plan = _plan(row, framework, model, assumed, approx, cluster.gpus_per_node)
    try:
        job = Job(model=model, plan=plan, cluster=cluster)
    except ValueError as exc:
        raise Unexpressible(f"the simulator rejects the job: {exc}") from None
    runs = row.pipeline_runs or 1
    if plan.num_microbatches % runs:
        raise Unexpressible(f"pipeline_runs {runs} does not divide the step's {plan.num_microbatches} micro-batches")
    return RowJob(job, tuple(assumed + cluster_assumed), tuple(approx + cluster_approx), framework,
                  microbatch_choices=_microbatch_choices(row, plan), pipeline_runs=runs,
                  recompute_choices=LEAST_MEMORY_FIRST if row.ratio_only and row.recompute is None else (),
                  fixed_batch=_stated_batch(row))


def _reasons(row: PublishedRow) -> list[str]:
    """Why ``row`` cannot be simulated or compared (empty when it can)."""
    out = []
    if row.measured_step_s is None and not row.ratio_only:
        out.append(f"no measured step time ({row.step_basis or 'not stated'}"
                   f"{': ' + row.step_derivation if row.step_derivation else ''})")
    if row.ffn_hidden is None:
        out.append("FFN width not stated")
    note = (row.zero_note or "").lower()
    if _hybrid_sharded(row) and not any(w in note for w in NODE_SHARD_WORDS):
        out.append(f"hybrid sharding without its shard group stated (zero_note {row.zero_note!r}): "
                   "expected 'shard inside node'")
    world = row.tp * row.pp * row.cp * row.dp
    if world != row.gpus:
        out.append(f"tp*pp*cp*dp = {world} differs from gpus = {row.gpus}")
    if row.global_batch is None and isinstance(row.global_batch_tokens, str):
        out.append(f"global batch not stated in sequences (only {row.global_batch_tokens!r} tokens)")
    return out


def _model(row: PublishedRow, framework: Framework, assumed: list[Note], approx: list[Note]) -> ModelSpec:
    preset = moe_model(row)  # the row names an MoE preset
    if preset is not None:
        return preset
    kind = (row.ffn_kind or "gelu").split()[0].lower()
    gpt = kind == "gelu"  # GPT-style: tied embeddings (GPT_STYLE); ReLU rows (Nemotron's squared ReLU, OPT) not
    if row.ffn_kind is None:
        assumed.append(Note("ffn-kind", "FFN kind not stated: gelu"))
    if kind == "relu":
        approx.append(Note("relu", "ReLU FFN run as GeLU (the same two matrices)"))
        kind = "gelu"
    if kind not in ("gelu", "swiglu"):
        raise Unexpressible(f"FFN kind {row.ffn_kind!r}: expected gelu, swiglu or relu")
    if gpt:
        assumed.append(Note("tied-embeddings", "embedding and output projection tied (GPT-style default)"))
    style = {**(LLAMA_STYLE if kind == "swiglu" else GPT_STYLE if gpt else {}), **framework.model_overrides}
    try:
        return ModelSpec(name=row.name, num_layers=row.layers, hidden_size=row.hidden, num_heads=row.heads,
                         num_kv_heads=row.kv_heads, ffn_hidden_size=row.ffn_hidden, ffn_kind=kind,
                         vocab_size=_vocab(row, framework, assumed), seq_len=row.seq_len, **style)
    except ValueError as exc:
        raise Unexpressible(f"the simulator rejects the model: {exc}") from None


def _vocab(row: PublishedRow, framework: Framework, assumed: list[Note]) -> int:
    """The row's vocabulary padded as its framework pads it."""
    vocab = row.vocab
    if vocab is None:
        vocab = DEFAULT_VOCAB
        assumed.append(Note("vocab", f"vocabulary not stated: {DEFAULT_VOCAB} (GPT-2 BPE)"))
    if framework.vocab_multiple_per_tp:
        multiple = framework.vocab_multiple_per_tp * row.tp
        vocab = -(-vocab // multiple) * multiple
    return vocab


def _plan(row: PublishedRow, framework: Framework, model: ModelSpec, assumed: list[Note],
          approx: list[Note], gpus_per_node: int) -> ParallelPlan:
    microbatch = _microbatch(row, assumed)
    vpp = _vpp(row, assumed)
    settings: dict[str, Any] = framework.plan_fields()
    settings.update(
        tp=row.tp, cp=row.cp, pp=row.pp, dp=row.dp, vpp=vpp, zero=row.zero, microbatch_size=microbatch,
        global_batch=_global_batch(row, microbatch, assumed), sequence_parallel=_sp(row, framework, model, assumed),
        recompute=_recompute(row, framework, assumed, approx), dtype=_dtype(row, assumed, approx),
        schedule="1f1b" if vpp == 1 else "interleaved", uneven_stages=_uneven(row, vpp, assumed), **_offload(row))
    settings.update(moe_plan_fields(row, model, assumed))
    if "async tp" in row.framework.lower():
        settings["tp_comm_overlap"] = True
    if COMPOSER_PURE in (row.notes or "") and framework.preset == "llm-foundry":
        settings["grad_reduce_dtype"] = "compute"  # Composer 'PURE' reduces in the compute dtype
    settings.update(_compile(row, approx))
    settings.update(_fp8(row, settings["dtype"]))
    if _hybrid_sharded(row):  # sharded inside a node (_reasons)
        settings["dp_replicate"] = row.tp * row.cp * row.dp * row.pp // gpus_per_node
    if settings.get("zero3_unit") == "module" and row.zero == 3:
        assumed.append(Note("zero3-limits", "DeepSpeed stage3_max_live_parameters, stage3_max_reuse_distance and "
                                            "stage3_prefetch_bucket_size not stated: DeepSpeed's defaults "
                                            "(1e9, 1e9, 5e7 elements)"))
    try:
        return ParallelPlan(**settings)
    except ValueError as exc:
        raise Unexpressible(f"the simulator rejects the plan: {exc}") from None


def _microbatch(row: PublishedRow, assumed: list[Note]) -> int:
    if row.microbatch_size is None:
        assumed.append(Note("mbs", "micro-batch size not stated: 1"))
        return 1
    return row.microbatch_size


def _hybrid_sharded(row: PublishedRow) -> bool:
    """The row's ``zero_note`` states hybrid sharding (:data:`HYBRID_WORDS`)."""
    return any(w in (row.zero_note or "").lower() for w in HYBRID_WORDS)


def _microbatch_choices(row: PublishedRow, plan: ParallelPlan) -> tuple[int, ...]:
    """The sizes a benchmark's authors could have picked when the row omits the micro-batch size: the
    default sweep's sizes dividing the stated batch per data-parallel rank (none when the batch
    itself is unstated: then each step is one micro-batch of an assumed size)."""
    stated_batch = _stated_batch(row)
    if row.microbatch_size is None and row.ratio_only and not stated_batch:
        return MICROBATCH_SIZES  # the source tuned the batch per twin; one micro-batch per step
    if row.microbatch_size is not None or not stated_batch:
        return ()
    per_rank = plan.global_batch // plan.dp
    return tuple(m for m in MICROBATCH_SIZES if per_rank % m == 0)


def _stated_batch(row: PublishedRow) -> bool:
    """The row states its global batch (in sequences, or in tokens as a whole number)."""
    return row.global_batch is not None or isinstance(row.global_batch_tokens, int)


def _global_batch(row: PublishedRow, microbatch: int, assumed: list[Note]) -> int:
    """Sequences per step: stated, or from stated tokens, or micro-batch x dp x accumulation."""
    per_step = microbatch * row.dp
    if row.global_batch is not None:
        if row.grad_accum is not None and row.global_batch != per_step * row.grad_accum:
            raise Unexpressible(f"global_batch {row.global_batch} differs from micro-batch x dp x grad_accum "
                                f"= {per_step * row.grad_accum}")
        return row.global_batch
    if isinstance(row.global_batch_tokens, int):
        if row.global_batch_tokens % row.seq_len:
            raise Unexpressible(f"global_batch_tokens {row.global_batch_tokens} is not a whole number of "
                                f"{row.seq_len}-token sequences")
        return row.global_batch_tokens // row.seq_len
    if row.grad_accum is None:
        assumed.append(Note("grad-accum", "global batch and gradient accumulation not stated: one "
                                          "micro-batch per step"))
    return per_step * (row.grad_accum or 1)


def _vpp(row: PublishedRow, assumed: list[Note]) -> int:
    if row.vpp is None and row.pp > 1:
        assumed.append(Note("vpp", "virtual pipeline not stated: vpp 1 (non-interleaved 1F1B)"))
    return row.vpp or 1


def _sp(row: PublishedRow, framework: Framework, model: ModelSpec, assumed: list[Note]) -> bool:
    """The row's sequence parallelism; unstated: its framework preset's (torchtitan's TP is
    sequence-parallel, NeMo's recipes turn it on with TP), or what the model's layers need under
    TP (Megatron-Core's MoE layers: the rule ``trainsim simulate`` applies,
    :meth:`schedules.layer_kinds.MoELayers.tp_plan_defaults`), else off."""
    if row.sequence_parallel is not None:
        return row.sequence_parallel
    preset = bool(framework.plan_fields().get("sequence_parallel", False))
    if row.tp == 1:
        return preset
    needed = bool(layer_kind(model).tp_plan_defaults(row.tp).get("sequence_parallel", False))
    how = (f"on, as {framework.preset} runs TP" if preset else
           "on, as MoE layers need it with TP" if needed else "off")
    assumed.append(Note("sp", f"sequence parallelism not stated: {how}"))
    return preset or needed


def _uneven(row: PublishedRow, vpp: int, assumed: list[Note]) -> bool:
    stages = row.pp * vpp
    if row.layers % stages == 0:
        return False
    assumed.append(Note("uneven-stages", f"{row.layers} layers on {stages} stages: the first and last "
                                         "stages hold fewer layers (they also hold the embedding and loss)"))
    return True


def _recompute(row: PublishedRow, framework: Framework, assumed: list[Note], approx: list[Note]) -> str:
    text = (row.recompute or "not stated").lower()
    if text.startswith("not stated"):
        assumed.append(Note("recompute", "recompute not stated: none"))
        return "none"
    words = text.replace("(", " ").split()
    kind = next((w for w in words if w in RECOMPUTE_KINDS), None)
    if kind is None:
        raise Unexpressible(f"recompute {row.recompute!r}: expected none, selective or full")
    if words[0] not in RECOMPUTE_KINDS:  # e.g. "implied full (...)"
        assumed.append(Note("recompute", f"recompute {kind}: {row.recompute}"))
    if kind == "selective":
        approx += [note for word, note in framework.selective_variants.items() if word in text]
    return kind


def _dtype(row: PublishedRow, assumed: list[Note], approx: list[Note]) -> str:
    text = (row.dtype or "not stated").lower()
    if text.startswith("not stated"):
        assumed.append(Note("dtype", "precision not stated: bf16"))
        return "bf16"
    first = text.split()[0].strip(",;")
    if first == "fp16":
        approx.append(Note("fp16", "fp16 run as bf16 (the same tensor-core peak; loss scaling not modelled)"))
        return "bf16"
    if first in ("bf16", "fp8", "fp32"):
        return first
    raise Unexpressible(f"dtype {row.dtype!r}: expected bf16, fp16, fp8 or fp32")


FP8_RECIPE_WORDS = (("delayed", "delayed"), ("current scaling", "tensorwise"), ("tensorwise", "tensorwise"),
                    ("rowwise", "rowwise"), ("blockwise", "blockwise"), ("mxfp8", "mxfp8"))
FP8_GATHER_WORDS = ("float8 all-gather", "fp8 all-gather", "fp8-param-gather", "fp8 param gather")


def _fp8(row: PublishedRow, dtype: str) -> dict[str, Any]:
    """An FP8 row's recipe and parameter gather where its ``dtype`` text states them (else the
    framework preset's)."""
    text = (row.dtype or "").lower()
    if dtype != "fp8":
        return {}
    out: dict[str, Any] = {}
    recipe = next((r for word, r in FP8_RECIPE_WORDS if word in text), None)
    if recipe is not None:
        out["fp8_recipe"] = recipe
    if any(word in text for word in FP8_GATHER_WORDS):
        out["fp8_param_gather"] = True
    return out


def _offload(row: PublishedRow) -> dict[str, Any]:
    """ZeRO-Offload / Infinity settings from the row's ``offload`` text (keywords: optimizer,
    param, activation, nvme)."""
    text = (row.offload or "").lower()
    if not text:
        return {}
    kind = "params" if "param" in text else "optimizer" if "optimizer" in text else None
    if kind is None:
        raise Unexpressible(f"offload {row.offload!r}: names neither optimizer states nor parameters")
    return dict(offload=kind, offload_device="nvme" if "nvme" in text else "cpu",
                offload_activations="activation" in text)


def _compile(row: PublishedRow, approx: list[Note]) -> dict[str, Any]:
    """torch.compile on: element-wise work runs as fused kernels (inductor fuses it; how it
    groups the ops is not modelled)."""
    text = (row.compile or "").lower()
    if text.startswith("on"):
        approx.append(Note("compile", "torch.compile on: element-wise work modelled as fused kernels "
                                      "(inductor's own grouping of the ops is not modelled)"))
        return {"elementwise": "fused"}
    if text.startswith("ambiguous"):
        approx.append(Note("compile?", f"torch.compile on or off ({row.compile}): run with the preset's "
                                       "element-wise kernels"))
    return {}
