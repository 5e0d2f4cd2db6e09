"""``trainsim presets``: the clusters, devices, links and models that can be named."""

from __future__ import annotations

import argparse

from schedules.model import model_presets
from sim.cli.output import print_json, print_table
from topo import cluster_presets, device_presets


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``presets`` subcommand."""
    p = sub.add_parser("presets", help="list cluster, device and model presets")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the preset tables."""
    clusters = [{"cluster": n, "device": c.device.name, "gpus_per_node": c.gpus_per_node, "nodes": c.nodes,
                 "usd_per_gpu_hour": c.price_per_gpu_hour_usd} for n, c in cluster_presets().items()]
    devices = [{"device": n, "bf16_tflops": d.peak_bf16_flops / 1e12, "fp8_tflops": d.peak_fp8_flops / 1e12,
                "hbm_gib": d.hbm_bytes / 1024**3, "hbm_GBps": d.hbm_GBps} for n, d in device_presets().items()]
    models = [{"model": n, "params_b": round(m.num_params() / 1e9, 3), "layers": m.num_layers, "hidden": m.hidden_size,
               "heads": m.num_heads, "kv_heads": m.kv_heads, "ffn": m.ffn, "seq_len": m.seq_len}
              for n, m in model_presets().items()]
    if args.json:
        print_json({"clusters": clusters, "devices": devices, "models": models})
        return 0
    print_table("clusters (scale with --nodes)", clusters)
    print_table("devices", devices)
    print_table("models", models)
    return 0
