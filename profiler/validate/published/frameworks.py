"""The software choices of the frameworks behind the published runs, as today's plan flags allow.

Each entry is matched by a lowercase substring of the row's ``framework`` text (first match wins)
and sets the plan flags the framework's documented behaviour decides, with its source. What a
framework does that no plan flag expresses is listed as an approximation (the row still runs, as
the nearest plan); features that change the run too much to approximate are rejected in
:mod:`profiler.validate.published.jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.validate.published.notes import Note

FSDP = Note("fsdp", "PyTorch FSDP run as the plan's ZeRO-3 (each layer gathered one layer ahead, "
                    "reduce-scattered after its backward); FSDP units and prefetch depth not modelled")
TORCHTITAN_SAC = Note("sac", "torchtitan selective AC (per-op: recomputes the ops its policy does not save; "
                             "per-layer: recomputes every k-th block) run as Megatron's selective recompute, "
                             "which with flash attention recomputes nothing")
TP_COMM_OVERLAP = Note("tp-overlap", "--tp-comm-overlap (TP communication overlapped with GEMMs) not modelled: "
                                     "TP collectives block the layer")


@dataclass(frozen=True)
class Framework:
    """Plan flags one framework's runs use.

    Attributes:
        key: lowercase substring of the row's ``framework`` text.
        flash_attention: fused attention that never stores the s x s scores.
        overlap_grad_reduce: DP gradient reduction overlaps the backward.
        overlap_param_gather: ZeRO-1/2 parameter all-gathers are prefetched under the next forward.
        vocab_multiple_per_tp: the vocabulary is padded to a multiple of this times TP (None: as given).
        memory_kind: what the framework's logged peak memory is ("reserved"/"allocated"), if known.
        approx: stated behaviour the plan cannot express (run as the nearest plan).
        assumed: framework settings the sources leave unstated (run with the plan default).
        selective: what "selective" recompute means there, when it is not Megatron's.
        source: where the choices are documented.
    """

    key: str
    flash_attention: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool = True
    vocab_multiple_per_tp: int | None = None
    memory_kind: str | None = None
    approx: tuple[Note, ...] = ()
    assumed: tuple[Note, ...] = ()
    selective: Note | None = None
    source: str = ""


# Megatron-LM pads the vocabulary to a multiple of --make-vocab-size-divisible-by (128) x TP
# (megatron/training/tokenizer: _vocab_size_with_padding); Megatron-DeepSpeed inherits it.
MEGATRON_PAD = 128
FRAMEWORKS: tuple[Framework, ...] = (
    Framework("megatron-core", flash_attention=True, overlap_grad_reduce=True, vocab_multiple_per_tp=MEGATRON_PAD,
              approx=(TP_COMM_OVERLAP,),
              source="NVIDIA/Megatron-LM README 'Performance Benchmarking' (flags --overlap-grad-reduce "
                     "--overlap-param-gather --tp-comm-overlap); Transformer Engine's fused attention"),
    Framework("megatron-lm (2021", flash_attention=False, overlap_grad_reduce=False, vocab_multiple_per_tp=MEGATRON_PAD,
              source="Megatron-LM 2021 (before FlashAttention, 2022): fused softmax over the s x s scores; "
                     "data-parallel all-reduce after the pipeline schedule"),
    Framework("bigscience", flash_attention=False, overlap_grad_reduce=False, overlap_param_gather=False,
              vocab_multiple_per_tp=MEGATRON_PAD,
              source="Megatron-DeepSpeed (BLOOM, 2022): fused softmax; DeepSpeed's PipelineEngine reduces "
                     "gradients after the schedule (ReduceGrads instruction); its ZeRO-1 optimizer "
                     "all-gathers the updated parameters inside the optimizer step"),
    Framework("deepspeed", flash_attention=False, overlap_grad_reduce=True, vocab_multiple_per_tp=MEGATRON_PAD,
              assumed=(Note("overlap", "DeepSpeed overlap_comm not stated: reductions overlap the backward "
                                       "(plan default)"),),
              source="DeepSpeed 0.6 + Megatron-DeepSpeed (2022, before FlashAttention)"),
    Framework("torchtitan", flash_attention=True, overlap_grad_reduce=True, memory_kind="reserved",
              approx=(FSDP,), selective=TORCHTITAN_SAC,
              source="torchtitan: SDPA attention (flash kernel), FSDP2; logged memory = torch.cuda "
                     "reserved_bytes.all.peak (torchtitan metrics.py DeviceMemoryMonitor)"),
    Framework("llm-foundry", flash_attention=True, overlap_grad_reduce=True, approx=(FSDP,),
              source="llm-foundry benchmarks: attn_impl triton (flash attention), Composer FSDP FULL_SHARD"),
    Framework("fms-fsdp", flash_attention=True, overlap_grad_reduce=True, approx=(FSDP,),
              source="IBM fms-fsdp: SDPA FlashAttention-2, PyTorch FSDP"),
)
DEFAULT = Framework("", flash_attention=True, overlap_grad_reduce=True,
                    assumed=(Note("framework", "framework not in the table: plan defaults (flash attention, "
                                               "overlapped reductions)"),))


def framework_for(text: str) -> Framework:
    """The first table entry whose key is in ``text`` (case-insensitive), else :data:`DEFAULT`."""
    lowered = text.lower()
    return next((f for f in FRAMEWORKS if f.key in lowered), DEFAULT)
