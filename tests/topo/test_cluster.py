"""Cluster presets, resizing, validation, and the TOML cluster file."""

from __future__ import annotations

from pathlib import Path

import pytest

from topo import (
    ClusterSpec,
    UnknownNameError,
    cluster_presets,
    dump_cluster_toml,
    get_cluster,
    get_device,
    load_cluster_file,
)

REQUIRED = ("dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "aws-p4d", "aws-p5", "gcp-a3",
            "pcie-4090", "cpu-host")


def test_required_presets_load_and_scale_by_nodes() -> None:
    presets = cluster_presets()
    assert set(REQUIRED) <= set(presets)
    for name, spec in presets.items():
        assert spec.price_per_gpu_hour_usd >= 0
        if spec.fabric == "single-node":
            continue
        big = get_cluster(name, nodes=16)
        assert big.nodes == 16 and big.num_gpus == 16 * spec.gpus_per_node
        assert big.device == spec.device and big.name == name


def test_node_facts_from_hardware_facts() -> None:
    p4d, p5 = get_cluster("aws-p4d"), get_cluster("aws-p5")
    assert p4d.nics_per_node * p4d.nic.gbps == pytest.approx(400)  # type: ignore[union-attr]
    assert p5.nics_per_node * p5.nic.gbps == pytest.approx(3200)  # type: ignore[union-attr]
    assert get_cluster("dgx-a100").nic.gbps == pytest.approx(200)  # type: ignore[union-attr]
    assert get_cluster("pcie-4090").nvlink is None and not get_cluster("pcie-4090").pcie_p2p


def test_cpu_host_ranks_are_configurable() -> None:
    spec = get_cluster("cpu-host", gpus_per_node=4)
    assert spec.num_gpus == 4 and spec.intra_node == "host"
    with pytest.raises(ValueError, match="nodes"):
        get_cluster("cpu-host", nodes=2)


def test_get_cluster_overrides_price() -> None:
    assert get_cluster("dgx-h100", price_per_gpu_hour_usd=1.5).price_per_gpu_hour_usd == 1.5
    with pytest.raises(ValueError, match="price_per_gpu_hour_usd"):
        get_cluster("dgx-h100", price_per_gpu_hour_usd=-1.0)


def test_unknown_cluster_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_cluster("dgx-h1000")
    msg = str(err.value)
    assert "dgx-h1000" in msg and all(n in msg for n in REQUIRED) and "\n" not in msg


def test_validation_errors_name_the_field() -> None:
    base = get_cluster("dgx-h100")
    with pytest.raises(ValueError, match="oversubscription"):
        base.with_overrides({"oversubscription": 0.5})
    with pytest.raises(ValueError, match="fabric"):
        base.with_overrides({"fabric": "torus"})
    with pytest.raises(ValueError, match="nics_per_node"):
        base.with_overrides({"nics_per_node": 3})
    with pytest.raises(ValueError, match="nvlink"):
        base.with_overrides({"nvlink": None})
    with pytest.raises(ValueError, match="nodes_typo"):
        base.with_overrides({"nodes_typo": 2})


def test_toml_round_trip(tmp_path: Path) -> None:
    tuned = get_device("h100-sxm").with_overrides({"gemm_efficiency": 0.75, "kernel_overhead_s": 3e-6})
    spec = get_cluster("aws-p5", nodes=4).with_overrides({"device": tuned, "oversubscription": 2.0})
    path = tmp_path / "c.toml"
    path.write_text(dump_cluster_toml(spec))
    assert load_cluster_file(path) == spec
    for name, preset in cluster_presets().items():
        path.write_text(dump_cluster_toml(preset))
        assert load_cluster_file(path) == preset, name


def test_toml_with_base_and_edits(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('base = "dgx-h100"\nnodes = 4\nnic = "roce-400g"\nnic_gbps = 200\n'
                    'oversubscription = 2\n[host]\ndram_bytes = 1099511627776\n'
                    '[overrides.device]\nattention_efficiency = 0.6\n')
    spec = load_cluster_file(path)
    assert spec.nodes == 4 and spec.oversubscription == 2
    assert spec.nic is not None and spec.nic.name == "roce-400g" and spec.nic.bandwidth_GBps == 25.0
    assert spec.host.dram_bytes == 2**40 and spec.device.attention_efficiency == 0.6
    assert spec.name == "dgx-h100"


def test_toml_without_base(tmp_path: Path) -> None:
    path = tmp_path / "box.toml"
    path.write_text('device = "l40s"\nintra_node = "pcie"\npcie = "pcie-gen4"\n'
                    'gpus_per_pcie_switch = 4\nfabric = "single-node"\n'
                    '[host]\ncpu_cores = 32\ndram_bytes = 274877906944\ndram_GBps = 200.0\n')
    spec = load_cluster_file(path)
    assert spec.name == "box" and spec.device.name == "l40s" and spec.num_gpus == 8


@pytest.mark.parametrize(("text", "words"), [
    ('base = "dgx-h100"\nnodez = 2\n', ["nodez", "nodes", "fabric"]),
    ('base = "dgx-h1000"\n', ["base", "dgx-h1000", "dgx-h100"]),
    ('base = "dgx-h100"\ndevice = "h1000"\n', ["device", "h1000", "h100-sxm"]),
    ('base = "dgx-h100"\nnic = "ib-ndrr"\n', ["nic", "ib-ndrr", "ib-ndr"]),
    ('base = "dgx-h100"\nnodes = "four"\n', ["nodes", "four", "integer"]),
    ('base = "dgx-h100"\nfabric = "torus"\n', ["fabric", "torus", "rail-optimized"]),
    ('base = "dgx-h100"\noversubscription = 0.5\n', ["oversubscription", "0.5"]),
    ('base = "dgx-h100"\n[host]\ndram = 1\n', ["dram", "dram_bytes"]),
    ('base = "dgx-h100"\n[overrides.device]\ngemm = 1\n', ["gemm", "gemm_efficiency"]),
    ('base = "dgx-h100"\n[overrides.gpu]\ngemm_efficiency = 1\n', ["gpu", "device"]),
    ('base = "dgx-h100"\nnic_gbps = -5\n', ["nic_gbps", "-5"]),
    ('nodes = 2\n', ["missing", "device"]),
    ('base = "dgx-h100"\nnodes = \n', ["not valid TOML"]),
])
def test_toml_bad_keys_and_values_give_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_cluster_file(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    for word in words:
        assert word in msg


def test_structure_helpers() -> None:
    p4d = get_cluster("aws-p4d", nodes=2)
    # 4 NICs for 8 GPUs: GPUs 2i and 2i+1 share NIC i, which sits on their PCIe switch
    assert [p4d.nic_of_local(g) for g in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [p4d.switch_of_nic(i) for i in range(4)] == [0, 1, 2, 3]
    p5 = get_cluster("aws-p5")
    assert p5.graph_nics_per_node == 8 and p5.ports_per_graph_nic == 4
    assert isinstance(p5, ClusterSpec) and p5.leaf_of(17, 3) == (1, 0)
    assert get_cluster("dgx-h100").leaf_of(33, 5) == (1, 5)
