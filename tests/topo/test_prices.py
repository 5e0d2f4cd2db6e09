"""Every cluster preset's price has a basis, a source and a date (issue 28), and is the preset's price."""

from __future__ import annotations

import re

import pytest

from topo import cluster_presets
from topo.prices import PRESET_PRICES, PriceBasis, preset_price


@pytest.mark.parametrize("name", sorted(cluster_presets()))
def test_every_preset_price_has_a_basis_source_and_date(name: str) -> None:
    price = preset_price(name)
    assert cluster_presets()[name].price_per_gpu_hour_usd == price.usd_per_gpu_hour
    assert price.source and isinstance(price.basis, PriceBasis)
    if price.basis is not PriceBasis.NONE:
        assert re.fullmatch(r"20\d\d(-\d\d)?, RECALLED", price.as_of), price.as_of
        assert price.usd_per_gpu_hour > 0


def test_no_price_without_a_preset() -> None:
    assert set(PRESET_PRICES) == set(cluster_presets())


def test_the_same_gpu_under_two_bases_is_labelled() -> None:
    """aws-p5 ($12.29) and dgx-h100 ($2.99) are both H100 SXM: the labels say why they differ."""
    p5, dgx = preset_price("aws-p5"), preset_price("dgx-h100")
    assert p5.usd_per_gpu_hour == pytest.approx(98.32 / 8) and dgx.usd_per_gpu_hour == 2.99
    assert p5.basis is PriceBasis.HYPERSCALER_ON_DEMAND and dgx.basis is PriceBasis.GPU_CLOUD_ON_DEMAND
    assert "p5.48xlarge $98.32/h" in p5.label and "2023-07" in p5.label
