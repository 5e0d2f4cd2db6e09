"""Flags shared by ``simulate`` and ``compare``: model, plan, cluster and simulation settings."""

from __future__ import annotations

import argparse
from typing import Any

from schedules.attention_kernels import ATTENTION_KERNELS
from schedules.frameworks import FRAMEWORK_PRESETS
from schedules.plan import (
    ACTIVATION_OFFLOAD_UNITS,
    ELEMENTWISE_KINDS,
    FP8_RECIPES,
    FP8_WEIGHT_CASTS,
    FRAMEWORKS,
    GRAD_REDUCE_DTYPES,
    GRAD_SYNC_KINDS,
    LOSS_DTYPES,
    MOE_DISPATCHERS,
    MOE_OVERLAP_KINDS,
    OFFLOAD_DEVICES,
    OFFLOAD_KINDS,
    OPTIMIZER_KINDS,
    PIPELINE_P2P_KINDS,
    SELECTIVE_KINDS,
    ZERO3_GATHERS,
    ZERO3_UNITS,
)
from sim.flow.transport import FIDELITIES
from sim.job import DEFAULT_JOB, Job, read_job_file, resolve_job
from sim.job_settings import SETTINGS


def _bool_flag(parser: argparse._ArgumentGroup, name: str, help_text: str) -> None:
    parser.add_argument(name, action=argparse.BooleanOptionalAction, default=None, help=help_text)


def add_job_arguments(parser: argparse.ArgumentParser, with_schedule: bool = True) -> None:
    """Add every job flag; unset flags stay None so a --config file can fill them."""
    parser.add_argument("--config", metavar="JOB.toml", help="job file ([model], [plan], [cluster], [sim]); flags override it")
    m = parser.add_argument_group("model (a preset, or dimensions)")
    m.add_argument("--model", help="model preset (see `trainsim presets`)")
    for flag, typ, text in (("--layers", int, "transformer layers"), ("--hidden", int, "hidden size"),
                            ("--heads", int, "attention heads"), ("--kv-heads", int, "key/value heads (GQA)"),
                            ("--ffn-hidden", int, "MLP inner size"), ("--vocab", int, "vocabulary size"),
                            ("--seq-len", int, "sequence length (tokens)")):
        m.add_argument(flag, type=typ, help=text)
    m.add_argument("--ffn-kind", choices=("gelu", "swiglu"), help="MLP kind")
    p = parser.add_argument_group("parallel plan")
    for flag, text in (("--tp", "tensor parallel"), ("--cp", "context parallel"), ("--pp", "pipeline parallel"),
                       ("--dp", "data parallel (default: the GPUs left)"), ("--vpp", "virtual stages per rank"),
                       ("--microbatches", "micro-batches per pipeline per step (default 16; the global batch is "
                                          "this x dp x micro-batch size)"),
                       ("--global-batch", "sequences per step (instead of --microbatches)")):
        p.add_argument(flag, type=int, help=text)
    p.add_argument("--microbatch-size", type=int_or_auto, metavar="N|auto",
                   help="sequences per micro-batch (default 1; auto, and the default when --global-batch is given "
                        "alone: the fastest of 1/2/4 that fits, sim/microbatch_tuning.py)")
    p.add_argument("--framework", dest="framework_preset", choices=tuple(FRAMEWORK_PRESETS),
                   help="training stack preset: sets the runtime, fused kernels, overlap, selective recompute and "
                        "ZeRO-3 unit choices that stack makes, under the flags given explicitly")
    p.add_argument("--runtime", dest="framework", choices=FRAMEWORKS,
                   help="pipeline/DP runtime modelled: megatron (default) or torch")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage")
    _bool_flag(p, "--sequence-parallel", "shard norm/dropout activations over TP")
    p.add_argument("--recompute", choices=("none", "selective", "full"),
                   help="activation recomputation: none keeps every activation; full keeps each layer's input "
                        "and redoes its whole forward in the backward; selective redoes only what "
                        "--selective-recompute names (attention: the s x s attention core, nothing with flash "
                        "attention; alternate-matmul: every second matmul and the element-wise work; "
                        "layernorm-moe-act: an MoE layer's pre-MLP norm and experts' activation)")
    p.add_argument("--selective-recompute", choices=SELECTIVE_KINDS, help="what --recompute selective recomputes")
    p.add_argument("--elementwise", choices=ELEMENTWISE_KINDS, help="element-wise kernels (auto: by runtime)")
    p.add_argument("--optimizer", choices=OPTIMIZER_KINDS, help="Adam kernel (auto: by runtime)")
    p.add_argument("--zero3-unit", choices=ZERO3_UNITS, help="what ZeRO-3 gathers at once")
    p.add_argument("--zero3-gather", choices=ZERO3_GATHERS,
                   help="with --zero3-unit module: coalesced (DeepSpeed >= 0.6) or per-param (DeepSpeed 2021: a "
                        "list-API collective per weight after a device synchronize)")
    for flag, deepspeed_key in (("--zero3-max-live-params", "stage3_max_live_parameters"),
                                ("--zero3-max-reuse-distance", "stage3_max_reuse_distance"),
                                ("--zero3-prefetch-bucket-params", "stage3_prefetch_bucket_size")):
        p.add_argument(flag, type=float, metavar="ELEMENTS",
                       help=f"with --zero3-unit module: DeepSpeed's {deepspeed_key} (default DeepSpeed's)")
    p.add_argument("--grad-reduce-dtype", choices=GRAD_REDUCE_DTYPES,
                   help="dtype of DP gradient reductions (auto: fp32 for the megatron runtime in bf16)")
    _bool_flag(p, "--master-weights", "the optimizer steps fp32 master weights with fp32 Adam states (default on; "
               "--no-master-weights: bf16 parameters and states, torch runtime, as NeMo AutoModel)")
    p.add_argument("--loss-dtype", choices=LOSS_DTYPES, help="the loss's softmax in fp32 (default) or the compute "
                   "dtype (torch runtime, as NeMo AutoModel's fp32_upcast: false)")
    p.add_argument("--grad-sync", choices=GRAD_SYNC_KINDS,
                   help="torch runtime, ZeRO-2/3: auto (pipelining reduces after a stage's last backward) or "
                        "every-microbatch (FSDP's hooks reduce in every backward under PP too, as NeMo AutoModel's "
                        "MoE models did before 2025-10-08)")
    _bool_flag(p, "--tp-comm-overlap", "overlap sequence-parallel TP collectives with the adjacent matmuls")
    p.add_argument("--pipeline-p2p", choices=PIPELINE_P2P_KINDS,
                   help="megatron runtime: pipeline sends/receives block the compute (blocking: a batched send/receive "
                        "then a device synchronize), run beside it (async), or auto (blocking unless interleaved)")
    _bool_flag(p, "--loss-allreduce", "megatron: the last stage all-reduces each micro-batch's reported loss over DP")
    _bool_flag(p, "--loss-nan-check", "megatron: a host sync per micro-batch checks the loss for NaN (Megatron-Core)")
    _bool_flag(p, "--timer-syncs", "megatron: timers synchronize the device around every pass (Megatron-LM before "
               "Aug 2022)")
    p.add_argument("--dp-bucket-bytes", type=int, metavar="BYTES", help="DP gradient bucket size")
    p.add_argument("--dtype", choices=("bf16", "fp8"), help="matmul dtype")
    p.add_argument("--fp8-recipe", choices=FP8_RECIPES,
                   help="with --dtype fp8: delayed (TE delayed scaling), tensorwise (dynamic per-tensor: torchao, TE "
                        "current scaling), rowwise (torchao), blockwise (DeepSeek-V3 1x128/128x128), mxfp8 (Blackwell); "
                        "default: the --framework's")
    p.add_argument("--fp8-weight-cast", choices=FP8_WEIGHT_CASTS,
                   help="with --dtype fp8: cast weights once per step (cached), every micro-batch, or at every use")
    _bool_flag(p, "--fp8-param-gather", "with --dtype fp8: ZeRO/FSDP parameter all-gathers in FP8")
    p.add_argument("--fp8-bf16-layers", type=int, metavar="N",
                   help="with --dtype fp8: the first and last N blocks stay BF16 (default 0)")
    if with_schedule:
        p.add_argument("--schedule", help="pipeline schedule (gpipe, 1f1b, interleaved, zb-h1, ...)")
    p.add_argument("--placement", help="dimensions innermost first, e.g. tp,cp,dp,pp")
    _bool_flag(p, "--uneven-stages", "allow layers not divisible by pp*vpp")
    _bool_flag(p, "--flash-attention", "fused attention that never stores the s x s scores (default on)")
    p.add_argument("--attention-kernel", choices=ATTENTION_KERNELS,
                   help="the fused attention kernel: flash2 (FlashAttention-2, default) or triton (FlashAttention "
                        "in Triton: 1.3x slower forward, 2x slower backward, Dao 2023 sec. 4.1)")
    _bool_flag(p, "--overlap-grad-reduce", "overlap the DP gradient reduction with the last backward (default on)")
    _bool_flag(p, "--overlap-param-gather", "prefetch ZeRO parameter all-gathers under compute (default on)")
    p.add_argument("--offload", choices=OFFLOAD_KINDS,
                   help="ZeRO-Offload optimizer states (zero>=1) or ZeRO-Infinity params too (zero=3)")
    p.add_argument("--offload-device", choices=OFFLOAD_DEVICES, help="where offloaded states live (default cpu)")
    _bool_flag(p, "--offload-activations", "copy activations to CPU after forward, back before backward")
    p.add_argument("--activation-offload-unit", choices=ACTIVATION_OFFLOAD_UNITS,
                   help="with --offload-activations: a stage's activations per micro-batch on a copy stream "
                        "(stage), or each layer's checkpoint synchronously (layer: DeepSpeed's CPU checkpointing)")
    p.add_argument("--dp-replicate", type=int, help="hybrid sharding (FSDP HYBRID_SHARD, with --zero 3 and a torch "
                   "framework): DP replicas, each sharding the states over dp/dp_replicate ranks (default 1)")
    p.add_argument("--ep", type=int, help="expert parallel (MoE models; divides dp and the experts)")
    p.add_argument("--etp", type=int, help="expert tensor parallel (divides tp; default 1)")
    p.add_argument("--moe-imbalance", type=float, help="most loaded EP rank's tokens / even share (>= 1; default 1)")
    p.add_argument("--moe-overlap", choices=MOE_OVERLAP_KINDS, help="all-to-alls under the other micro-batch's "
                   "compute (auto: on under dualpipev)")
    p.add_argument("--moe-dispatcher", choices=MOE_DISPATCHERS, help="alltoall (a copy per routed expert, "
                   "default) or deepep (a copy per destination node)")
    c = parser.add_argument_group("cluster")
    c.add_argument("--cluster", help="cluster preset or a cluster TOML file (default dgx-h100)")
    c.add_argument("--nodes", type=int, help="nodes (default: 2 of the default cluster; with --dp, as many as the "
                                             "plan needs; a --cluster preset's own count)")
    c.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the preset's)")
    c.add_argument("--price", dest="price_per_gpu_hour_usd", type=float, metavar="USD", help="price per GPU-hour")
    c.add_argument("--profile", metavar="PROFILE.toml", help="hardware profile (trainsim calibrate) applied to the cluster")
    c.add_argument("--gpu-speed-cv", type=float, metavar="CV",
                   help="part-to-part speed variation of the GPUs (coefficient of variation); compute runs at the "
                        "slowest GPU's pace (default: the device's, 0.0098 for GPU presets from Sinha et al. SC'22; "
                        "0 = identical GPUs)")
    s = parser.add_argument_group("simulation")
    s.add_argument("--steps", type=int, help="training steps to simulate (default 1)")
    s.add_argument("--full", action="store_true", default=None, help="simulate every rank (no folding)")
    _bool_flag(s, "--interference", "compute runs slower beside communication kernels on GPUs (default on)")
    s.add_argument("--exact", action="store_true", default=None,
                   help="simulate every micro-batch (default: a long step is simulated with fewer micro-batches "
                        "and its steady state extended, where that is exact)")
    s.add_argument("--ideal-network", action="store_true", default=None, help="communication costs nothing")
    s.add_argument("--detail", choices=("auto", "op", "task"), help="timeline detail (default auto)")
    s.add_argument("--fidelity", choices=FIDELITIES, help="network model: analytic (default) or flow (max-min fair flows, congestion)")
    s.add_argument("--jitter-cv", type=float, metavar="CV",
                   help="stragglers: coefficient of variation of each rank's compute between collectives "
                        "(expected-value model; default 0)")


JOB_DESTS = tuple(SETTINGS)  # every setting has a flag (dest = the setting's key)


def job_settings(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """Settings from --config merged with the flags (flags win), plus ``overrides``."""
    settings: dict[str, Any] = read_job_file(args.config) if getattr(args, "config", None) else {}
    for dest in JOB_DESTS:
        value = getattr(args, dest, None)
        if value is not None:
            settings[dest] = value
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return settings


def int_or_auto(text: str) -> int | str:
    """A flag's integer, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


def job_from_args(args: argparse.Namespace, **overrides: Any) -> Job:
    """The Job the flags (and --config) describe: the embedded default job (:data:`sim.job.DEFAULT_JOB`)
    with every setting given replaced."""
    return resolve_job(job_settings(args, **overrides), defaults=DEFAULT_JOB)
