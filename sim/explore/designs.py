"""Cluster designs: preset names or TOML files, sized to a GPU count and priced.

Errors are one line and list what is valid (``trainsim explore`` turns them into exit code 2).
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from pathlib import Path

from core.errors import invalid
from sim.job_settings import SETTINGS
from topo import ClusterSpec, cluster_presets, get_cluster, load_cluster_file
from topo.prices import preset_price

PRICE_UNITS = {"gpu-hour": 1, "node-hour": 0}  # 0: divide by the design's GPUs per node


class PriceSource(StrEnum):
    """Where a design's price per GPU-hour comes from."""

    FLAG = "--price"
    PRESET = "preset list price"
    FILE = "cluster file"


def design_names() -> list[str]:
    """The cluster presets explore accepts (GPU clusters)."""
    return sorted(k for k, v in cluster_presets().items() if v.intra_node != "host")


def base_cluster(design: str) -> ClusterSpec:
    """The design's ClusterSpec before sizing: a preset, or a cluster TOML file (GPU clusters
    only: hosts whose devices are CPU processes model the trainer's test runs, not a purchase)."""
    if design.endswith(".toml") or Path(design).is_file():
        cluster = load_cluster_file(design)
    elif design in design_names():
        cluster = cluster_presets()[design]
    else:
        raise invalid("cluster", design, "expected a cluster TOML file or one of " + ", ".join(design_names()))
    if cluster.intra_node == "host":
        raise invalid("cluster", design, "explore sizes GPU clusters; this one runs CPU processes")
    return cluster


def parse_designs(text: str) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """``dgx-h100:512,dgx-a100:1024`` (DESIGN:GPUS pairs) or ``dgx-h100,aws-p5`` (sized by
    ``--gpus``), mixed freely: the designs in order, and the GPU counts given with them."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise invalid("cluster", text, "give cluster presets or TOML files, each optionally with its GPU count "
                      "(DESIGN:GPUS, e.g. dgx-h100:512): " + ", ".join(design_names()))
    sizes: dict[str, list[int]] = {}
    for item in items:
        name, _, count = item.rpartition(":")
        if not name:
            name, count = item, ""
        base_cluster(name)
        counts = sizes.setdefault(name, [])
        if count:
            counts.append(check_gpus(name, count, "cluster", item))
    return tuple(sizes), {k: tuple(dict.fromkeys(v)) for k, v in sizes.items() if v}


def check_gpus(design: str, count: str | int, field: str, shown: str) -> int:
    """``count`` as a GPU count of ``design`` (whole nodes); errors name ``field`` = ``shown``."""
    per_node = base_cluster(design).gpus_per_node
    valid = (f"{design} has {per_node} GPUs per node: expected a multiple of {per_node}, "
             f"e.g. {design}:{64 * per_node}")
    try:
        gpus = int(count)
    except ValueError:
        raise invalid(field, shown, "expected DESIGN:GPUS with GPUS an integer; " + valid) from None
    if gpus < 1 or gpus % per_node:
        raise invalid(field, shown, valid)
    return gpus


def parse_price(text: str, designs: tuple[str, ...]) -> tuple[str, float]:
    """``NAME=USD[/gpu-hour|/node-hour]`` -> (NAME, USD per GPU-hour); a bare amount is per
    GPU-hour. With one design, ``NAME=`` may be left out (``--price 2.5``, as for ``simulate``)."""
    form = "expected NAME=USD/gpu-hour or NAME=USD/node-hour with NAME one of " + ", ".join(designs)
    name, sep, value = text.partition("=")
    if not sep and len(designs) == 1:
        name, sep, value = designs[0], "=", text
    name = name.strip()
    if not sep or name not in designs:
        raise invalid("price", text, form)
    amount, _, unit = value.strip().partition("/")
    unit = unit.strip() or "gpu-hour"
    try:
        usd = float(amount)
    except ValueError:
        raise invalid("price", text, form) from None
    if unit not in PRICE_UNITS:
        raise invalid("price", text, form)
    per_gpu = usd if PRICE_UNITS[unit] else usd / base_cluster(name).gpus_per_node
    rule = SETTINGS["price_per_gpu_hour_usd"].rule  # simulate's --price and a job file's bounds
    if not rule.accepts(per_gpu):
        raise invalid("price", text, f"{rule.what} USD per GPU-hour (finite, not negative)")
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


def price_source(design: str, user_price: float | None) -> PriceSource:
    """Where ``design``'s price comes from, given the user's ``--price`` for it (or None)."""
    if user_price is not None:
        return PriceSource.FLAG
    return PriceSource.PRESET if design in cluster_presets() else PriceSource.FILE


def price_basis(design: str, user_price: float | None, *, full: bool = False) -> str:
    """Where ``design``'s price comes from and, for a preset, what it pays for
    (:class:`topo.prices.PriceBasis`): ``--price``, ``cluster file``, ``preset, on-demand GPU cloud``;
    ``full``: with the preset price's source and date."""
    source = price_source(design, user_price)
    if source is not PriceSource.PRESET:
        return str(source)
    price = preset_price(design)
    return f"preset, {price.label}" if full else f"preset, {price.basis.short}"


def mixed_bases(designs: tuple[str, ...], prices: dict[str, float]) -> str | None:
    """A note when the designs' preset prices have different bases (their costs then compare
    sellers, not hardware), else None."""
    bases = sorted({preset_price(d).basis.short for d in designs if d in cluster_presets() and d not in prices})
    if len(bases) < 2:
        return None
    return (f"note: the presets' prices have different bases ({', '.join(bases)}): their costs compare sellers as "
            "much as hardware; give --price NAME=USD for each design to compare at one basis")
