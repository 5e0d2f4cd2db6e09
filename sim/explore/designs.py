"""Cluster designs: preset names or TOML files, sized to a GPU count and priced.

Errors are one line and list what is valid (``trainsim explore`` turns them into exit code 2).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from schedules.errors import invalid
from topo import ClusterSpec, cluster_presets, get_cluster, load_cluster_file

PRICE_UNITS = {"gpu-hour": 1, "node-hour": 0}  # 0: divide by the design's GPUs per node


def base_cluster(design: str) -> ClusterSpec:
    """The design's ClusterSpec before sizing: a preset, or a cluster TOML file (GPU clusters
    only: hosts whose devices are CPU processes model the trainer's test runs, not a purchase)."""
    presets = {k: v for k, v in cluster_presets().items() if v.intra_node != "host"}
    if design.endswith(".toml") or Path(design).is_file():
        cluster = load_cluster_file(design)
    elif design in presets:
        cluster = presets[design]
    else:
        raise invalid("clusters", design, "expected a cluster TOML file or one of " + ", ".join(sorted(presets)))
    if cluster.intra_node == "host":
        raise invalid("clusters", design, "explore sizes GPU clusters; this one runs CPU processes")
    return cluster


def parse_clusters(text: str) -> tuple[str, ...]:
    """Comma-separated designs, each checked (unknown names list the valid ones)."""
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise invalid("clusters", text, "give at least one cluster preset or TOML file: "
                      + ", ".join(sorted(k for k, v in cluster_presets().items() if v.intra_node != "host")))
    for name in names:
        base_cluster(name)
    return names


def parse_price(text: str, designs: tuple[str, ...]) -> tuple[str, float]:
    """``NAME=USD[/gpu-hour|/node-hour]`` -> (NAME, USD per GPU-hour); a bare number is per GPU-hour."""
    form = "expected NAME=USD/gpu-hour or NAME=USD/node-hour with NAME one of " + ", ".join(designs)
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or name not in designs:
        raise invalid("price", text, form)
    amount, _, unit = value.strip().partition("/")
    unit = unit.strip() or "gpu-hour"
    try:
        usd = float(amount)
    except ValueError:
        raise invalid("price", text, form) from None
    if unit not in PRICE_UNITS or not usd >= 0:
        raise invalid("price", text, form)
    per_gpu = usd if PRICE_UNITS[unit] else usd / base_cluster(name).gpus_per_node
    return name, per_gpu


def sized_cluster(design: str, gpus: int, price_per_gpu_hour_usd: float | None = None) -> ClusterSpec:
    """The design with ``gpus`` GPUs (whole nodes) and, if given, the user's price."""
    base = base_cluster(design)
    if gpus % base.gpus_per_node:
        raise invalid("gpus", gpus, f"must be a multiple of {design}'s {base.gpus_per_node} GPUs per node")
    nodes = gpus // base.gpus_per_node
    if design in cluster_presets():
        return get_cluster(design, nodes=nodes, price_per_gpu_hour_usd=price_per_gpu_hour_usd)
    changes: dict[str, object] = {"nodes": nodes}
    if price_per_gpu_hour_usd is not None:
        changes["price_per_gpu_hour_usd"] = price_per_gpu_hour_usd
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
