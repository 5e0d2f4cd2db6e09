"""Command-line flags of a trainer run, shared by ``trainsim profile`` and the torchrun worker.

:func:`add_train_arguments` declares them, :func:`config_from_args` turns parsed flags into a
validated :class:`TrainConfig`, and :func:`config_to_argv` turns a config back into flags (the
worker command line the launcher runs on every rank). Torch-free.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from typing import Any

from core.errors import build_checked, invalid
from profiler.trainer.config import (
    DEVICES,
    DTYPES,
    OFFLOADS,
    OPTIMIZERS,
    RECOMPUTE,
    SCHEDULES,
    TrainConfig,
)
from profiler.trainer.moe_config import add_moe_arguments, apply_moe_flags
from schedules.model import ModelSpec
from schedules.model_presets import get_model

DEFAULT_MODEL = "tiny"


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the run flags on ``parser``."""
    add = parser.add_argument
    add("--model", default=DEFAULT_MODEL, help="model preset (default %(default)s)")
    add("--seq-len", type=int, default=None, help="override the model's sequence length")
    add("--tp", type=int, default=1, help="tensor (+sequence) parallel degree")
    add("--pp", type=int, default=1, help="pipeline parallel degree")
    add("--dp", type=int, default=1, help="data parallel degree")
    add("--schedule", default="1f1b", help="pipeline schedule: " + ", ".join(SCHEDULES))
    add("--vpp", type=int, default=None,
        help="chunks per pipeline rank (default: what the schedule needs, 2 for interleaved)")
    add("--zero", type=int, default=0, help="ZeRO stage 0-3 (0: replicated DP)")
    add("--microbatch-size", type=int, default=1, help="sequences per micro-batch")
    add("--global-batch", type=int, default=None,
        help="sequences per step (default: dp * microbatch-size * max(2, 2*pp))")
    add("--steps", type=int, default=3, help="measured (profiled) steps")
    add("--warmup-steps", type=int, default=2, help="steps before the measured ones")
    add("--recompute", default="none", help="activation checkpointing: " + ", ".join(RECOMPUTE))
    add("--device", default="auto", help="device: " + ", ".join(DEVICES))
    add("--dtype", default="auto", help="compute dtype: " + ", ".join(DTYPES))
    add("--optimizer", default="adamw", help="optimizer: " + ", ".join(OPTIMIZERS))
    add("--lr", type=float, default=None, help="learning rate (default 3e-3)")
    add("--offload", default="none",
        help="FSDP2 CPU offload (sharded params, grads, optimizer states on the host; needs "
             "--dp >= 2 and --zero 2/3): " + ", ".join(OFFLOADS))
    add("--seed", type=int, default=0, help="seed of the weights and the synthetic data")
    add("--slow-rank", default=None, metavar="R:FACTOR",
        help="make rank R's forward/backward compute FACTOR times slower")
    add("--slow-comm", default=None, metavar="DIM:SECONDS",
        help="make every collective of mesh dim DIM complete SECONDS later (dp, ZeRO-2/3)")
    add("--fail-rank", type=int, default=None, help=argparse.SUPPRESS)
    add_moe_arguments(parser)
    add("--model-json", default=None, help=argparse.SUPPRESS)


def parse_slow_rank(text: str | None) -> tuple[int | None, float]:
    """``"R:FACTOR"`` -> (R, FACTOR); None -> (None, 1.0)."""
    if text is None:
        return None, 1.0
    rank, sep, factor = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return int(rank), float(factor)
    except ValueError:
        raise invalid("slow-rank", text, "expected RANK:FACTOR, e.g. 1:2.0") from None


def parse_slow_comm(text: str | None) -> tuple[str | None, float]:
    """``"DIM:SECONDS"`` -> (DIM, SECONDS); None -> (None, 0.0)."""
    if text is None:
        return None, 0.0
    dim, sep, seconds = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return dim, float(seconds)
    except ValueError:
        raise invalid("slow-comm", text, "expected DIM:SECONDS, e.g. dp:0.02") from None


def resolve_model(args: argparse.Namespace) -> ModelSpec:
    """The model spec from ``--model`` (or the hidden ``--model-json``) and ``--seq-len``."""
    spec = _model_from_json(args.model_json) if args.model_json else get_model(args.model)
    spec = apply_moe_flags(spec, args)
    return replace(spec, seq_len=args.seq_len) if args.seq_len is not None else spec


def _model_from_json(text: str) -> ModelSpec:
    """``--model-json``: a ModelSpec's fields as a JSON object (keys and values checked, one line)."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid("model-json", text, f"expected a JSON object of ModelSpec fields ({exc})") from None
    return build_checked(ModelSpec, fields, "model-json")  # type: ignore[no-any-return]


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """A validated :class:`TrainConfig` from parsed flags (ValueError names the bad flag)."""
    if args.schedule not in SCHEDULES:
        raise invalid("schedule", args.schedule, "expected one of " + ", ".join(SCHEDULES))
    fixed_vpp = SCHEDULES[args.schedule].vpp
    vpp = args.vpp if args.vpp is not None else (fixed_vpp or 2)
    global_batch = args.global_batch
    if global_batch is None:
        global_batch = args.dp * args.microbatch_size * max(2, 2 * args.pp)
    slow_rank, slow_factor = parse_slow_rank(args.slow_rank)
    slow_comm_dim, slow_comm_s = parse_slow_comm(getattr(args, "slow_comm", None))
    extra: dict[str, Any] = {} if args.lr is None else {"lr": args.lr}
    return TrainConfig(
        model=resolve_model(args), tp=args.tp, pp=args.pp, dp=args.dp, vpp=vpp,
        schedule=args.schedule, zero=args.zero, microbatch_size=args.microbatch_size,
        global_batch=global_batch, steps=args.steps, warmup_steps=args.warmup_steps,
        recompute=args.recompute, device=args.device, dtype=args.dtype,
        optimizer=args.optimizer, seed=args.seed, slow_rank=slow_rank,
        slow_factor=slow_factor, slow_comm_dim=slow_comm_dim, slow_comm_s=slow_comm_s,
        fail_rank=args.fail_rank, offload=getattr(args, "offload", "none"),
        ep=getattr(args, "ep", 1), **extra)


def _model_flags(spec: ModelSpec) -> list[str]:
    """``--model NAME [--seq-len N]`` when ``spec`` is a preset (maybe re-lengthened), else JSON."""
    try:
        preset = get_model(spec.name)
    except ValueError:
        preset = None
    if preset is not None and replace(preset, seq_len=spec.seq_len) == spec:
        seq = [] if preset.seq_len == spec.seq_len else ["--seq-len", str(spec.seq_len)]
        return ["--model", spec.name, *seq]
    return ["--model-json", json.dumps(asdict(spec), sort_keys=True)]


def config_to_argv(config: TrainConfig) -> list[str]:
    """Flags that :func:`config_from_args` turns back into ``config``."""
    argv = _model_flags(config.model)
    for flag in ("tp", "pp", "dp", "vpp", "schedule", "zero", "microbatch_size", "global_batch",
                 "steps", "warmup_steps", "recompute", "device", "dtype", "optimizer", "lr",
                 "seed", "offload", "ep"):
        argv += ["--" + flag.replace("_", "-"), str(getattr(config, flag))]
    if config.slow_rank is not None:
        argv += ["--slow-rank", f"{config.slow_rank}:{config.slow_factor}"]
    if config.slow_comm_dim is not None:
        argv += ["--slow-comm", f"{config.slow_comm_dim}:{config.slow_comm_s!r}"]
    if config.fail_rank is not None:
        argv += ["--fail-rank", str(config.fail_rank)]
    return argv
