"""Cluster TOML files: read (stdlib tomllib) and write, mapping onto :class:`ClusterSpec`.

Keys (all optional when ``base`` names a preset, which supplies the rest):
    name, base, device, nodes, gpus_per_node, intra_node, nvlink, pcie, gpus_per_pcie_switch,
    pcie_p2p, nic, nics_per_node, nic_gbps (per-NIC line rate in Gb/s, overrides the nic's),
    fabric, oversubscription, nodes_per_leaf, leaf_blocks_per_pod, pod_oversubscription,
    socket_link, price_per_gpu_hour_usd, nccl_version,
    [host] (HostSpec fields), [overrides.device|nvlink|pcie|nic|socket_link] (spec fields).
Devices and links are named by preset (topo.device_presets / topo.link_presets); the overrides
tables replace fields of those presets (e.g. a calibrated gemm_efficiency). Every bad key or value
raises a one-line ValueError naming the key, the value and the valid options.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from core.errors import invalid, require_number
from topo.cluster import ClusterSpec
from topo.cluster_presets import cluster_presets
from topo.device_presets import device_presets
from topo.host import HostSpec
from topo.link_presets import link_presets
from topo.toml_file import load_toml

LINK_KEYS = ("nvlink", "pcie", "nic", "socket_link")
SCALAR_KEYS = ("name", "nodes", "gpus_per_node", "intra_node", "gpus_per_pcie_switch", "pcie_p2p",
               "nics_per_node", "fabric", "oversubscription", "nodes_per_leaf",
               "leaf_blocks_per_pod", "pod_oversubscription", "price_per_gpu_hour_usd",
               "nccl_version")
KEYS = ("base", "device", *LINK_KEYS, *SCALAR_KEYS, "nic_gbps", "host", "overrides",
        "reliability")  # [reliability]: the run-level inputs (sim.run.reliability_file), not the cluster's
OVERRIDE_ROLES = ("device", *LINK_KEYS)


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """Read a cluster TOML file; errors are one-line ValueErrors prefixed with the path."""
    stem = Path(path).stem
    return load_toml(path, lambda data: cluster_from_mapping(data, default_name=stem))


def cluster_from_mapping(data: dict[str, Any], default_name: str = "custom") -> ClusterSpec:
    """Build a ClusterSpec from a parsed cluster file (see the module docstring)."""
    for key in data:
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r}; valid: {', '.join(KEYS)}")
    fields: dict[str, Any] = {"name": default_name, "socket_link": link_presets()["upi"]}
    if "base" in data:
        base = _lookup("base", data["base"], cluster_presets())
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    fields.update({k: data[k] for k in SCALAR_KEYS if k in data})
    if "device" in data:
        fields["device"] = _lookup("device", data["device"], device_presets())
    for key in LINK_KEYS:
        if key in data:
            fields[key] = _lookup(key, data[key], link_presets())
    if "nic_gbps" in data:
        fields["nic"] = _nic_rate(fields.get("nic"), data["nic_gbps"])
    missing = [k for k in ("device", "pcie", "host") if k not in fields and k not in data]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)} (required without a base preset)")
    fields["host"] = _host(fields.get("host"), data.get("host", {}))
    _apply_overrides(fields, data.get("overrides", {}))
    return ClusterSpec(**fields)


def _lookup(key: str, value: Any, registry: dict[str, Any]) -> Any:
    if not isinstance(value, str) or value not in registry:
        raise invalid(key, value, "expected one of " + ", ".join(sorted(registry)))
    return registry[value]


def _nic_rate(nic: Any, gbps: Any) -> Any:
    require_number("nic_gbps", gbps, low=0.0, low_inclusive=False)
    if nic is None:
        raise invalid("nic_gbps", gbps, "needs a nic (set nic = \"<link name>\" or a base)")
    return nic.with_overrides({"bandwidth_GBps": gbps / 8})


def _host(base: HostSpec | None, table: Any) -> HostSpec:
    if not isinstance(table, dict):
        raise invalid("host", table, "expected a table of HostSpec fields")
    if base is not None:
        return base.with_overrides(table)
    names = [f.name for f in dataclasses.fields(HostSpec)]
    for key in table:
        if key not in names:
            raise ValueError(f"unknown host key {key!r}; valid: {', '.join(names)}")
    try:
        return HostSpec(**table)
    except TypeError:
        raise invalid("host", table, "needs cpu_cores, dram_bytes, dram_GBps without a base") from None


def _apply_overrides(fields: dict[str, Any], overrides: Any) -> None:
    if not isinstance(overrides, dict):
        raise invalid("overrides", overrides, "expected tables [overrides.<role>]")
    for role, table in overrides.items():
        if role not in OVERRIDE_ROLES:
            raise ValueError(f"unknown overrides table {role!r}; valid: {', '.join(OVERRIDE_ROLES)}")
        if fields.get(role) is None or not isinstance(table, dict):
            raise invalid(f"overrides.{role}", table, f"needs a {role} and a table of its fields")
        fields[role] = fields[role].with_overrides(table)


def dump_cluster_toml(spec: ClusterSpec) -> str:
    """TOML text that :func:`load_cluster_file` reads back into an equal ClusterSpec."""
    lines = [f"name = {_toml(spec.name)}", f"device = {_toml(spec.device.name)}"]
    for key in LINK_KEYS:
        link = getattr(spec, key)
        if link is not None:
            lines.append(f"{key} = {_toml(link.name)}")
    lines += [f"{key} = {_toml(getattr(spec, key))}" for key in SCALAR_KEYS if key != "name"]
    lines += ["", "[host]"]
    lines += [f"{f.name} = {_toml(getattr(spec.host, f.name))}" for f in dataclasses.fields(HostSpec)]
    presets: dict[str, dict[str, Any]] = {"device": device_presets(),
                                          **{k: link_presets() for k in LINK_KEYS}}
    for role, registry in presets.items():
        changed = _changed_fields(role, getattr(spec, role), registry)
        if changed:
            lines += ["", f"[overrides.{role}]"] + [f"{k} = {_toml(v)}" for k, v in changed.items()]
    return "\n".join(lines) + "\n"


def _changed_fields(role: str, component: Any, registry: dict[str, Any]) -> dict[str, Any]:
    if component is None:
        return {}
    if component.name not in registry:
        raise invalid(role, component.name, "only preset names can be written; valid: "
                      + ", ".join(sorted(registry)))
    preset = registry[component.name]
    return {f.name: getattr(component, f.name) for f in dataclasses.fields(component)
            if getattr(component, f.name) != getattr(preset, f.name)}


def _toml(value: Any) -> str:
    """A TOML literal for a str, bool, int or float."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
