"""Host memory tier copy model: the slowest of PCIe, switch uplink sharing, and the tier."""

from __future__ import annotations

import pytest

from topo import get_cluster, host_copy_GBps, host_copy_time_s


def test_single_gpu_copy_runs_at_pcie_speed() -> None:
    spec = get_cluster("dgx-h100")
    assert host_copy_GBps(spec, "dram", "to_host") == pytest.approx(spec.pcie.effective_GBps)
    assert host_copy_time_s(spec, 2e9, "dram", "to_device") == pytest.approx(2e9 / (spec.pcie.effective_GBps * 1e9))


def test_sharing_the_switch_and_the_nvme() -> None:
    spec = get_cluster("dgx-h100")
    # two GPUs per PCIe switch halve the uplink; 8 GPUs share NVMe writes of 33.9 GB/s
    assert host_copy_GBps(spec, "dram", "to_host", 8) == pytest.approx(spec.pcie.effective_GBps / 2)
    assert host_copy_GBps(spec, "nvme", "to_host", 8) == pytest.approx(33.9 / 8)
    assert host_copy_GBps(spec, "nvme", "to_device", 1) == pytest.approx(spec.pcie.effective_GBps)


def test_bad_arguments() -> None:
    spec = get_cluster("aws-p4d")
    with pytest.raises(ValueError, match="tier"):
        host_copy_GBps(spec, "tape", "to_host")
    with pytest.raises(ValueError, match="gpus_copying"):
        host_copy_GBps(spec, "dram", "to_host", 9)
