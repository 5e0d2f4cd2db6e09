"""The trainer's MoE settings: command-line flags and what the trainer's MoE block supports.

Torch-free (the CLI validates flags without torch). ``--moe-experts N`` turns the ``--model``
preset's MLPs into MoE blocks (:class:`schedules.moe.MoESpec`); ``--ep`` splits their experts
over expert-parallel ranks (:mod:`profiler.trainer.moe_parallel`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import singledispatch

from core.errors import invalid
from core.vocab import Offload
from schedules.layer_kinds import DenseLayers, LayerKind, MoELayers, layer_kind
from schedules.model import ModelSpec
from schedules.moe import MoESpec, moe_of

FLAGS = ("moe_top_k", "moe_ffn", "moe_shared_experts", "moe_dense_layers")


def add_moe_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the MoE flags on ``parser``."""
    add = parser.add_argument
    add("--ep", type=int, default=1, help="expert-parallel degree (MoE; divides --dp)")
    add("--moe-experts", type=int, default=None,
        help="routed experts per layer: makes the model's MLPs mixture-of-experts blocks")
    add("--moe-top-k", type=int, default=None, help="experts per token (default 2)")
    add("--moe-ffn", type=int, default=None,
        help="inner width of one expert (default: the model's ffn_hidden_size)")
    add("--moe-shared-experts", type=int, default=None, help="experts every token uses (default 0)")
    add("--moe-dense-layers", type=int, default=None, help="first layers kept dense (default 0)")


def apply_moe_flags(spec: ModelSpec, args: argparse.Namespace) -> ModelSpec:
    """``spec`` with the MoE flags applied (unchanged without ``--moe-experts``)."""
    experts = getattr(args, "moe_experts", None)
    if experts is None:
        given = [name for name in FLAGS if getattr(args, name, None) is not None]
        if given:
            raise invalid(given[0].replace("_", "-"), getattr(args, given[0]), "needs --moe-experts")
        return spec
    values = {"moe-experts": experts, "moe-top-k": _or(args.moe_top_k, 2),
              "moe-ffn": _or(args.moe_ffn, spec.ffn),
              "moe-shared-experts": _or(args.moe_shared_experts, 0),
              "moe-dense-layers": _or(args.moe_dense_layers, 0)}
    for flag, value in values.items():
        low = 0 if flag in ("moe-shared-experts", "moe-dense-layers") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise invalid(flag, value, f"expected an integer >= {low}")
    if values["moe-top-k"] > experts:
        raise invalid("moe-top-k", values["moe-top-k"], f"expected <= --moe-experts={experts}")
    moe = MoESpec(num_experts=experts, top_k=values["moe-top-k"], expert_ffn_size=values["moe-ffn"],
                  num_shared_experts=values["moe-shared-experts"],
                  first_dense_layers=values["moe-dense-layers"])
    return replace(spec, name=f"{spec.name}-moe{experts}-top{moe.top_k}", moe=moe)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def check_moe(model: ModelSpec, *, ep: int, dp: int, zero: int, offload: str) -> None:
    """Raise a one-line error for an MoE setting the trainer cannot run (what its layers' kind
    allows: :func:`_check_layers`)."""
    _check_layers(layer_kind(model), model, ep=ep, dp=dp, zero=zero, offload=offload)


@singledispatch
def _check_layers(kind: LayerKind, model: ModelSpec, *, ep: int, dp: int, zero: int, offload: str) -> None:
    """What the trainer runs for blocks of ``kind`` (one function per layer kind)."""
    raise TypeError(f"no trainer check for layer kind {type(kind).__name__}")


@_check_layers.register
def _(kind: DenseLayers, model: ModelSpec, *, ep: int, dp: int, zero: int, offload: str) -> None:
    """Dense blocks: no experts to split, so no expert parallelism."""
    if ep > 1:
        raise invalid("ep", ep, "needs an MoE model (--moe-experts N)")


@_check_layers.register
def _(kind: MoELayers, model: ModelSpec, *, ep: int, dp: int, zero: int, offload: str) -> None:
    """MoE blocks: the trainer's block (:func:`_check_block`) and its expert parallelism."""
    moe = moe_of(model)
    _check_block(model, moe)
    if ep == 1:
        return
    if dp % ep:
        raise invalid("ep", ep, f"must divide dp={dp} (expert-parallel ranks are data-parallel ranks)")
    if moe.num_experts % ep:
        raise invalid("ep", ep, f"must divide the experts per layer ({moe.num_experts})")
    if zero == 1:
        raise invalid("zero", zero, "ZeRO-1 broadcasts parameters over all dp ranks, which would "
                      "overwrite other EP ranks' experts; with ep > 1 use --zero 0, 2 or 3")
    if offload != Offload.NONE:
        raise invalid("offload", offload, "is not supported with ep > 1 (use none)")


def _check_block(model: ModelSpec, moe: MoESpec) -> None:
    """What the trainer's MoE block (SwiGLU experts, bias-free, no token dropping) builds."""
    if model.ffn_kind != "swiglu":
        raise invalid("ffn_kind", model.ffn_kind, "the trainer's experts are SwiGLU (use a swiglu model)")
    unsupported = {"capacity_factor": moe.capacity_factor, "attention": moe.attention,
                   "router_bias": moe.router_bias or None, "expert_bias": moe.expert_bias or None,
                   "routing": None if moe.routing == "uniform" else moe.routing,  # its router is learned
                   "activation_clamp": moe.activation_clamp}
    for name, value in unsupported.items():
        if value is not None:
            raise invalid(f"moe.{name}", value, "the trainer's MoE block does not support it")
