"""The cluster presets' prices per GPU-hour, each with its basis, source and date.

Every preset price is an on-demand rental list price (none is the cost of owning the hardware:
purchase, power, hosting and staff over its life, which is lower per GPU-hour at high use and
which a buyer states with ``--price``). Two kinds of seller are behind them, and their prices are
not alike for the same GPU:

- a hyperscaler instance (AWS EC2, Google Cloud): the instance's on-demand price divided by its 8
  GPUs, which also pays for the instance's CPUs, memory, disks and network (EFA, GPUDirect-TCPX);
- a GPU cloud (Lambda's on-demand price list): GPUs rented per GPU-hour, 8-GPU HGX/DGX-class
  servers with InfiniBand.

So ``aws-p5`` ($12.29) and ``dgx-h100`` ($2.99) price the same H100 SXM under two bases; compare
designs at one basis by giving ``--price`` for each. Prices change often; each entry says when its
figure was listed (``as_of``); every one is RECALLED (remembered, not re-read from the seller's
page: an approximation to override with ``--price``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PriceBasis(StrEnum):
    """What a price per GPU-hour pays for."""

    HYPERSCALER_ON_DEMAND = "on-demand hyperscaler instance / 8 GPUs"
    GPU_CLOUD_ON_DEMAND = "on-demand GPU cloud, per GPU"
    MARKETPLACE = "community marketplace rental"
    NONE = "not for sale (a CPU host for the trainer's test runs)"

    @property
    def short(self) -> str:
        """A few words for tables: ``on-demand GPU cloud``."""
        return _SHORT[self]


_SHORT = {PriceBasis.HYPERSCALER_ON_DEMAND: "on-demand hyperscaler", PriceBasis.GPU_CLOUD_ON_DEMAND: "on-demand GPU cloud",
          PriceBasis.MARKETPLACE: "marketplace rental", PriceBasis.NONE: "no price"}


@dataclass(frozen=True, kw_only=True)
class PresetPrice:
    """A preset's price: USD per GPU-hour, its basis, where it was listed and when (YYYY-MM)."""

    usd_per_gpu_hour: float
    basis: PriceBasis
    source: str
    as_of: str

    @property
    def label(self) -> str:
        """``on-demand GPU cloud, per GPU: Lambda 8x H100 SXM (2024-06, RECALLED)``."""
        return f"{self.basis}: {self.source} ({self.as_of})"


def _aws(instance: str, usd_per_hour: float, as_of: str, check: str) -> PresetPrice:
    return PresetPrice(usd_per_gpu_hour=usd_per_hour / 8, basis=PriceBasis.HYPERSCALER_ON_DEMAND,
                       source=f"AWS EC2 {instance} ${usd_per_hour}/h, us-east-1", as_of=f"{as_of}, {check}")


def _lambda(usd: float, what: str, as_of: str) -> PresetPrice:
    return PresetPrice(usd_per_gpu_hour=usd, basis=PriceBasis.GPU_CLOUD_ON_DEMAND, source=f"Lambda {what}",
                       as_of=f"{as_of}, RECALLED")


_H100_LAMBDA = _lambda(2.99, "8x H100 SXM", "2024")
PRESET_PRICES: dict[str, PresetPrice] = {
    "dgx-a100": _lambda(1.79, "8x A100 80GB SXM", "2024"),
    "dgx-h100": _H100_LAMBDA,
    "hgx-h200": _lambda(3.50, "8x H200 (about)", "2025"),
    "dgx-b200": _lambda(4.99, "8x B200", "2025"),
    "dgx-h100-superpod": _H100_LAMBDA,
    "llama3-h100-roce": _H100_LAMBDA,
    "hgx-h100-roce": _H100_LAMBDA,
    # The instances' launch list prices; the p5 figure is the one third-party guides still quote in
    # 2026 (e.g. computespec.pages.dev "Cloud GPU Pricing Explained": $98.32/h, $12.29 per GPU), though
    # AWS cut P5 on-demand prices in 2025.
    "aws-p4d": _aws("p4d.24xlarge", 32.77, "2020-11", "RECALLED"),
    "aws-p4de": _aws("p4de.24xlarge", 40.97, "2022-05", "RECALLED"),
    "aws-p5": _aws("p5.48xlarge", 98.32, "2023-07", "RECALLED"),
    "gcp-a3": PresetPrice(usd_per_gpu_hour=88.25 / 8, basis=PriceBasis.HYPERSCALER_ON_DEMAND,
                          source="Google Cloud a3-highgpu-8g about $88.25/h, us-central1", as_of="2024, RECALLED"),
    "pcie-4090": PresetPrice(usd_per_gpu_hour=0.69, basis=PriceBasis.MARKETPLACE,
                             source="RTX 4090 rentals (e.g. RunPod community cloud)", as_of="2024, RECALLED"),
    "cpu-host": PresetPrice(usd_per_gpu_hour=0.0, basis=PriceBasis.NONE, source="none", as_of="-"),
}
"""Every cluster preset's price (:mod:`topo.cluster_presets` takes its price from here)."""


def preset_price(name: str) -> PresetPrice:
    """The price of cluster preset ``name`` (KeyError for a name that is not a preset)."""
    return PRESET_PRICES[name]
