"""Device and link specs, overrides, presets, and the compute roofline."""

from __future__ import annotations

import pytest

from topo import (
    DTYPES,
    DeviceSpec,
    LinkSpec,
    UnknownNameError,
    compute_time_s,
    device_presets,
    get_device,
    get_link,
    link_presets,
)

REQUIRED_DEVICES = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "l40s", "rtx-4090", "cpu-host")
REQUIRED_LINKS = ("nvlink3", "nvlink4", "nvlink5", "pcie-gen4", "pcie-gen5", "ib-hdr", "ib-ndr",
                  "ib-xdr", "efa-100g", "roce-100g", "roce-400g")


def test_required_presets_exist_and_validate() -> None:
    devices, links = device_presets(), link_presets()
    assert set(REQUIRED_DEVICES) <= set(devices)
    assert set(REQUIRED_LINKS) <= set(links)
    for d in devices.values():
        assert d.peak_flops("fp32") > 0 and d.hbm_bytes > 0
        assert 0 < d.gemm_efficiency <= 1 and 0 < d.attention_efficiency <= 1
    for link in links.values():
        assert 0 < link.efficiency <= 1


def test_datasheet_numbers_from_hardware_facts() -> None:
    # hardware-facts 2.1 (dense peaks) and 2.2 (line rates); efficiencies from the quoted ratios.
    assert get_device("h100-sxm").peak_flops("bf16") == 989e12
    assert get_device("h100-sxm").peak_flops("fp8") == 1979e12
    assert get_device("a100-80gb").peak_flops("bf16") == 312e12
    assert get_device("b200").peak_flops("fp8") == 4500e12
    assert get_device("a100-80gb").gemm_efficiency == pytest.approx(256.5 / 312)
    # NCCL's own per-link NVLink bandwidth (src/graph/topo.h SM90_NVLINK_BW 20.6 x 18 links)
    # = the maintainer's "effective NVLink bandwidth of 370GB/s" (nccl-tests #212)
    assert get_link("nvlink4").effective_GBps == pytest.approx(18 * 20.6)
    assert get_link("nvlink4").effective_GBps == pytest.approx(370.0, rel=0.01)
    assert get_link("nvlink3").effective_GBps == pytest.approx(12 * 20.0)
    assert get_link("ib-ndr").gbps == pytest.approx(400.0)
    assert get_link("ib-ndr").effective_GBps == pytest.approx(47.0)
    assert get_link("efa-100g").efficiency == pytest.approx(340 / 400)


def test_unknown_dtype_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="fp8") as err:
        get_device("a100-80gb").peak_flops("fp8")
    assert "bf16" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="supports"):
        compute_time_s(get_device("a100-40gb"), "gemm", 1e12, 0, "fp8")


def test_with_overrides_validates_field_names_and_values() -> None:
    h100 = get_device("h100-sxm")
    tuned = h100.with_overrides({"gemm_efficiency": 0.8})
    assert tuned.gemm_efficiency == 0.8 and tuned.name == h100.name and h100.gemm_efficiency != 0.8
    with pytest.raises(ValueError) as err:
        h100.with_overrides({"gemm_eff": 0.8})
    msg = str(err.value)
    assert "gemm_eff" in msg and "gemm_efficiency" in msg and "attention_efficiency" in msg
    with pytest.raises(ValueError, match="gemm_efficiency"):
        h100.with_overrides({"gemm_efficiency": 1.5})
    with pytest.raises(ValueError, match="latency"):
        get_link("ib-ndr").with_overrides({"latency": 1e-6})
    assert get_link("ib-ndr").with_overrides({"efficiency": 0.9}).effective_GBps == pytest.approx(45.0)


def test_spec_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="kind"):
        LinkSpec(name="x", kind="carrier-pigeon", bandwidth_GBps=1, latency_s=0, efficiency=1)
    with pytest.raises(ValueError, match="nvls_efficiency"):
        LinkSpec(name="x", kind="pcie", bandwidth_GBps=1, latency_s=0, efficiency=1, nvls_efficiency=0.5)
    with pytest.raises(ValueError, match="hbm_bytes"):
        DeviceSpec(name="x", peak_fp32_flops=1.0, hbm_bytes=0, hbm_GBps=1.0, gemm_efficiency=1.0,
                   attention_efficiency=1.0, hbm_efficiency=1.0)


def test_unknown_preset_names_list_valid() -> None:
    with pytest.raises(UnknownNameError, match="a100-80gb"):
        get_device("a1000")
    with pytest.raises(UnknownNameError, match="ib-ndr"):
        get_link("ib-ndrr")


def test_compute_roofline_closed_forms() -> None:
    d = get_device("a100-80gb")
    peak, hbm = 312e12, 2039e9 * d.hbm_efficiency
    flops, small_bytes = 2 * 8192**3, 3 * 8192**2 * 2
    assert compute_time_s(d, "gemm", flops, small_bytes, "bf16") == pytest.approx(
        d.kernel_overhead_s + flops / (peak * d.gemm_efficiency))
    # memory-bound GEMM (a skinny matmul): the bytes term wins
    assert compute_time_s(d, "gemm", 1e6, 1e9, "bf16") == pytest.approx(d.kernel_overhead_s + 1e9 / hbm)
    assert compute_time_s(d, "attention", 1e12, 0, "bf16") == pytest.approx(
        d.kernel_overhead_s + 1e12 / (peak * d.attention_efficiency))
    for op in ("elementwise", "optimizer"):
        assert compute_time_s(d, op, 1e15, 4e9, "fp32") == pytest.approx(d.kernel_overhead_s + 4e9 / hbm)
    assert compute_time_s(d, "gemm", 0, 0, "bf16") == d.kernel_overhead_s


def test_compute_rejects_bad_inputs() -> None:
    d = get_device("h100-sxm")
    with pytest.raises(ValueError, match="op_class"):
        compute_time_s(d, "fixed", 1, 1, "bf16")
    with pytest.raises(ValueError, match="flops"):
        compute_time_s(d, "gemm", -1, 1, "bf16")
    assert set(d.dtypes()) == set(DTYPES)
