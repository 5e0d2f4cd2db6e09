"""``trainsim explore``'s flags, and the sweep they describe.

Flags that mean what they mean for ``simulate`` have its names (``--cluster``, ``--nodes``,
``--model``, ``--seq-len``, ``--global-batch``, ``--tp`` ... ``--microbatch-size``,
``--schedule``, ``--sequence-parallel``, ``--price``); explore's take comma lists where simulate
takes one value. The older explore names (``--clusters``, ``--schedules``,
``--microbatch-sizes``) still work.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from core.errors import invalid
from schedules.frameworks import FRAMEWORK_PRESETS
from schedules.model_presets import get_model
from sim.cli.arg_types import positive_int
from sim.explore.defaults import (
    BATCH_TOKENS,
    TOKENS_PER_PARAM,
    default_global_batch,
    default_tokens,
)
from sim.explore.designs import base_cluster, check_gpus, parse_designs, parse_price
from sim.explore.spec import DEFAULT_SCHEDULES, SearchSpace, SweepSpec
from sim.explore.sweep import sweep_model
from sim.job_settings import SETTINGS

SWEEP_FLAGS = ("model", "tokens", "global_batch", "cluster", "gpus", "nodes", "price", "seq_len", "tp", "pp", "cp",
               "vpp", "schedule", "zero", "microbatch_size", "sequence_parallel", "recompute", "uneven_stages", "dtype",
               "framework_preset")
PLAN_LISTS = ("tp", "pp", "cp", "vpp", "zero")  # settings whose flag takes a comma list here


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The training run, the designs and the plan space."""
    s = p.add_argument_group("the training run and the designs")
    s.add_argument("--model", help="model preset (see `trainsim presets`)")
    s.add_argument("--seq-len", type=positive_int, help=SETTINGS["seq_len"].spec.help + " (default: the model's)")
    s.add_argument("--tokens", type=float,
                   help=f"tokens to train on, e.g. 1e12 (default: {TOKENS_PER_PARAM} per model parameter, the "
                        "compute-optimal ratio of Hoffmann et al. 2022, 'Chinchilla', arXiv:2203.15556)")
    s.add_argument("--global-batch", type=positive_int,
                   help=f"sequences per optimizer step, the same for every plan (default: ~{BATCH_TOKENS / 2**20:.0f}M "
                        "tokens / sequence length, as Llama 2, rounded to a multiple of the largest common "
                        "divisor of the GPU counts not above it)")
    s.add_argument("--cluster", "--clusters", dest="cluster", metavar="DESIGN[:GPUS],...",
                   help="comma-separated cluster presets or TOML files, each with its GPU count if you like: "
                        "dgx-h100:512,dgx-a100:1024 (designs without one use --gpus or --nodes)")
    size = s.add_mutually_exclusive_group()
    size.add_argument("--gpus", metavar="N,...", help="comma-separated GPU counts for every design without its own, e.g. 256,512")
    size.add_argument("--nodes", metavar="N,...", help="comma-separated node counts for every design without its own, e.g. 32,64")
    s.add_argument("--price", action="append", metavar="[NAME=]USD[/UNIT]",
                   help="price override, e.g. aws-p5=98.32/node-hour or dgx-h100=2.5/gpu-hour (repeatable; "
                        "NAME= may be left out with one design); default: the preset's list price")
    g = p.add_argument_group("plan space (default: see docs/commands/explore.md)")
    for name in PLAN_LISTS:
        g.add_argument(f"--{name}", metavar="N,...", help=f"comma-separated: {SETTINGS[name].spec.help}")
    g.add_argument("--microbatch-size", "--microbatch-sizes", dest="microbatch_size", metavar="N,...",
                   help="comma-separated micro-batch sizes (default 1,2,4)")
    g.add_argument("--schedule", "--schedules", dest="schedule", metavar="NAME,...",
                   help=f"comma-separated pipeline schedules (default {','.join(DEFAULT_SCHEDULES)})")
    g.add_argument("--sequence-parallel", nargs="?", const="on", metavar="on|off|on,off",
                   help="sequence parallelism: on, off or both (default on; off when tp = 1)")
    g.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_const", const="off",
                   help="same as --sequence-parallel off")
    g.add_argument("--recompute", metavar="MODE,...",
                   help=f"comma-separated: {', '.join(SETTINGS['recompute'].rule.values)} (default none,full)")
    g.add_argument("--uneven-stages", action=argparse.BooleanOptionalAction, default=None,
                   help="also try pp that does not divide the layers")
    g.add_argument("--dtype", choices=SETTINGS["dtype"].rule.values, help=SETTINGS["dtype"].spec.help + " (default bf16)")
    g.add_argument("--framework", dest="framework_preset", choices=sorted(FRAMEWORK_PRESETS),
                   help="the stack every plan runs with, as simulate's --framework (default: Megatron-Core's "
                        "defaults); ZeRO, SP, recompute and the schedule are swept over it")


def given_sweep_flags(args: argparse.Namespace) -> list[str]:
    """The sweep flags set on the command line (``--resume`` takes none)."""
    return [f"--{f.replace('_', '-')}" for f in SWEEP_FLAGS if getattr(args, f) is not None]


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    """The sweep the flags describe, with tokens and global batch defaulted when left out."""
    missing = [f"--{f}" for f in ("model", "cluster") if getattr(args, f) is None]
    if missing:
        raise ValueError(f"explore needs {' and '.join(missing)}, e.g. --model llama3-70b "
                         "--cluster dgx-h100:512,dgx-a100:1024 (or --resume DIR)")
    get_model(args.model)  # an unknown name lists the valid ones before any work
    clusters, sizes = parse_designs(args.cluster)
    shared = _shared_gpus(args, clusters, sizes)
    prices = tuple(parse_price(p, clusters) for p in args.price or ())
    # validated once with placeholders for the defaults, which need the sized designs
    base = SweepSpec(model=args.model, tokens=1.0 if args.tokens is None else args.tokens,
                     global_batch=1 if args.global_batch is None else args.global_batch,
                     clusters=clusters, gpus=shared.get("", ()), sizes=tuple((k, v) for k, v in shared.items() if k),
                     seq_len=args.seq_len, prices=prices, space=_space(args))
    return _with_defaults(base, args)


def _shared_gpus(args: argparse.Namespace, clusters: tuple[str, ...],
                 sizes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Per design its GPU counts ("" -> the --gpus shared by designs without their own)."""
    unsized = [d for d in clusters if d not in sizes]
    out: dict[str, tuple[int, ...]] = dict(sizes)
    if args.gpus is not None:
        counts = _ints("gpus", args.gpus)
        for design in unsized:
            for g in counts:
                check_gpus(design, g, "gpus", args.gpus)
        out[""] = counts
    elif args.nodes is not None:
        nodes = _ints("nodes", args.nodes)
        out |= {d: tuple(n * base_cluster(d).gpus_per_node for n in nodes) for d in unsized}
    return out


def _with_defaults(spec: SweepSpec, args: argparse.Namespace) -> SweepSpec:
    """``spec`` with the tokens and global batch the user left out filled in (and named)."""
    model = sweep_model(spec)
    defaulted = tuple(name for name in ("tokens", "global_batch") if getattr(args, name) is None)
    tokens = default_tokens(model) if args.tokens is None else args.tokens
    batch = (default_global_batch(model.seq_len, (g for _, g in spec.points())) if args.global_batch is None
             else args.global_batch)
    return dataclasses.replace(spec, tokens=tokens, global_batch=batch, defaulted=defaulted)


def _space(args: argparse.Namespace) -> SearchSpace:
    fields: dict[str, Any] = {}
    for name in ("tp", "pp", "cp", "vpp", "zero"):
        if getattr(args, name) is not None:
            fields[name] = _ints(name, getattr(args, name), allow_zero=name == "zero")
    if args.microbatch_size is not None:
        fields["microbatch_sizes"] = _ints("microbatch-size", args.microbatch_size)
    if args.schedule is not None:
        fields["schedules"] = _words(args.schedule)
    if args.recompute is not None:
        fields["recompute"] = _words(args.recompute)
    if args.sequence_parallel is not None:
        fields["sequence_parallel"] = _on_off(args.sequence_parallel)
    if args.uneven_stages is not None:
        fields["uneven_stages"] = args.uneven_stages
    if args.dtype:
        fields["dtype"] = args.dtype
    if args.framework_preset:
        fields["framework_preset"] = args.framework_preset
    return SearchSpace(**fields)


def _on_off(text: str) -> tuple[bool, ...]:
    choice = {"on": True, "off": False}
    words = _words(text)
    if not words or any(w not in choice for w in words):
        raise invalid("sequence-parallel", text, "expected on, off or on,off")
    return tuple(choice[w] for w in words)


def _words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))


def _ints(name: str, text: str, allow_zero: bool = False) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(w) for w in _words(text)))
    except ValueError:
        raise invalid(name.replace("_", "-"), text, "expected comma-separated integers, e.g. 1,2,4") from None
    if not values or any(v < (0 if allow_zero else 1) for v in values):
        raise invalid(name.replace("_", "-"), text, f"expected comma-separated integers >= {0 if allow_zero else 1}")
    return values
