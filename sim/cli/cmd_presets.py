"""``trainsim presets``: the clusters, devices, links and models that can be named."""

from __future__ import annotations

import argparse

from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.model_presets import model_presets
from schedules.moe import active_params
from schedules.moe_presets import moe_presets
from sim.cli.output import print_json, print_table
from topo import cluster_presets, device_presets
from topo.prices import PRESET_PRICES


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``presets`` subcommand."""
    p = sub.add_parser("presets", help="list cluster, device and model presets")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _model_row(name: str, m: ModelSpec) -> dict[str, object]:
    """A model's row: sizes, and for a mixture of experts its experts and active parameters."""
    return {"model": name, "params_b": round(m.num_params() / 1e9, 3),
            "active_params_b": round(active_params(m) / 1e9, 3),  # a dense model's: all of them
            "experts": layer_kind(m).experts_label(m), "layers": m.num_layers,
            "hidden": m.hidden_size, "heads": m.num_heads, "kv_heads": m.kv_heads, "ffn": m.ffn, "seq_len": m.seq_len}


def run(args: argparse.Namespace) -> int:
    """Print the preset tables."""
    clusters = [{"cluster": n, "device": c.device.name, "gpus_per_node": c.gpus_per_node, "nodes": c.nodes,
                 "usd_per_gpu_hour": c.price_per_gpu_hour_usd} for n, c in cluster_presets().items()]
    prices = [{"cluster": n, "usd_per_gpu_hour": p.usd_per_gpu_hour, "basis": str(p.basis), "source": p.source,
               "as_of": p.as_of} for n, p in PRESET_PRICES.items()]
    devices = [{"device": n, "bf16_tflops": d.peak_bf16_flops / 1e12, "fp8_tflops": d.peak_fp8_flops / 1e12,
                "hbm_gib": d.hbm_bytes / 1024**3, "hbm_GBps": d.hbm_GBps} for n, d in device_presets().items()]
    models = [_model_row(n, m) for n, m in {**model_presets(), **moe_presets()}.items()]
    if args.json:
        print_json({"clusters": clusters, "prices": prices, "devices": devices, "models": models})
        return 0
    print_table("clusters (scale with --nodes)", clusters)
    print_table("cluster prices: on-demand rental list prices (none is an owned-hardware cost; the two cloud bases "
                "differ for the same GPU: override with --price)", prices)
    print_table("devices", devices)
    print_table("models (every name --model accepts; experts: routed experts per token of those per layer)", models)
    return 0
