"""Hardware profiles: TOML files of calibrated fields applied on top of a cluster.

A profile overrides named fields of the cluster's device, links and host, and adds measured
collective costs (:mod:`topo.collective_fit`). ``trainsim calibrate`` writes one (every fitted
number with its sample count and fit error in a ``[fit]`` table); ``simulate --profile`` and
``validate --profile`` read it. Layout::

    [profile]                      name, cluster, backend, ... (free-form strings: provenance)
    [device]                       DeviceSpec fields
    [host]                         HostSpec fields
    [links.<role>]                 LinkSpec fields of the cluster's nvlink | pcie | nic | socket_link
    [[collectives]]                CollectiveFit fields (op, link, algorithm, alpha_s, ...)
    [fit."<section>.<field>"]      samples, rel_error, source (documentation of each fitted number)

Every bad key or value raises a one-line ValueError naming it (prefixed with the file path).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topo.cluster import ClusterSpec
from topo.collective_fit import FIT_KEYS, CollectiveFit, fit_from_mapping
from topo.device import DeviceSpec
from topo.host import HostSpec
from topo.link import LinkSpec
from topo.toml_file import load_toml

SECTIONS = ("profile", "device", "host", "links", "collectives", "fit")
LINK_ROLES = ("nvlink", "pcie", "nic", "socket_link")
FIT_INFO_KEYS = ("samples", "rel_error", "source")


@dataclass(frozen=True, kw_only=True)
class FitInfo:
    """How one profile number was obtained: samples used and the fit's median relative error."""

    samples: int
    rel_error: float
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """Calibrated overrides for a cluster (see the module docstring)."""

    meta: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    collectives: tuple[CollectiveFit, ...] = ()
    fits: dict[str, FitInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields("device", self.device, DeviceSpec)
        _check_fields("host", self.host, HostSpec)
        for role, table in self.links.items():
            if role not in LINK_ROLES:
                raise ValueError(f"links.{role}: unknown link role; valid: {', '.join(LINK_ROLES)}")
            _check_fields(f"links.{role}", table, LinkSpec)

    def apply(self, cluster: ClusterSpec) -> ClusterSpec:
        """``cluster`` with the profile's device, host and link fields (validated)."""
        changes: dict[str, Any] = {}
        if self.device:
            changes["device"] = _prefixed("device", cluster.device.with_overrides, self.device)
        if self.host:
            changes["host"] = _prefixed("host", cluster.host.with_overrides, self.host)
        for role, table in self.links.items():
            link = getattr(cluster, role)
            if link is None:
                raise ValueError(f"links.{role}: cluster {cluster.name!r} has no {role} link")
            changes[role] = _prefixed(f"links.{role}", link.with_overrides, table)
        return dataclasses.replace(cluster, **changes) if changes else cluster


def _check_fields(section: str, table: Mapping[str, Any], spec: type) -> None:
    names = [f.name for f in dataclasses.fields(spec) if f.name not in ("name", "kind")]
    for key in table:
        if key not in names:
            raise ValueError(f"{section}.{key}: unknown field; valid: {', '.join(names)}")


def _prefixed(section: str, apply: Any, table: Mapping[str, Any]) -> Any:
    try:
        return apply(table)
    except ValueError as exc:
        raise ValueError(f"{section}.{exc}") from None


def profile_from_mapping(data: Mapping[str, Any]) -> HardwareProfile:
    """A HardwareProfile from parsed TOML (see the module docstring for the layout)."""
    for key in data:
        if key not in SECTIONS:
            raise ValueError(f"{key}: unknown section; valid: {', '.join(SECTIONS)}")
    tables = {k: data.get(k, {}) for k in ("profile", "device", "host", "links", "fit")}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ValueError(f"{name}: expected a table")
    collectives = data.get("collectives", [])
    if not isinstance(collectives, list):
        raise ValueError("collectives: expected an array of tables [[collectives]]")
    return HardwareProfile(meta={k: str(v) for k, v in tables["profile"].items()},
                           device=dict(tables["device"]), host=dict(tables["host"]),
                           links={k: dict(v) for k, v in tables["links"].items()},
                           collectives=tuple(_collective(i, c) for i, c in enumerate(collectives)),
                           fits={k: _fit_info(k, v) for k, v in tables["fit"].items()})


def _collective(index: int, table: Any) -> CollectiveFit:
    try:
        if not isinstance(table, dict):
            raise ValueError("expected a table")
        return fit_from_mapping(table)
    except ValueError as exc:
        raise ValueError(f"collectives[{index}]: {exc}") from None


def _fit_info(key: str, table: Any) -> FitInfo:
    if not isinstance(table, dict) or any(k not in FIT_INFO_KEYS for k in table):
        raise ValueError(f"fit.{key}: expected a table with keys {', '.join(FIT_INFO_KEYS)}")
    try:
        return FitInfo(samples=int(table["samples"]), rel_error=float(table["rel_error"]),
                       source=str(table.get("source", "")))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"fit.{key}: needs samples (int) and rel_error (number)") from None


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile TOML file; errors are one-line ValueErrors prefixed with the path."""
    return load_toml(path, profile_from_mapping)


def dump_profile_toml(profile: HardwareProfile, header: str = "") -> str:
    """TOML text that :func:`load_profile` reads back into an equal profile (keys sorted)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, table in (("profile", profile.meta), ("device", profile.device), ("host", profile.host)):
        if table:
            lines += ["", f"[{name}]"] + [f"{k} = {_toml(table[k])}" for k in sorted(table)]
    for role in sorted(profile.links):
        table = profile.links[role]
        lines += ["", f"[links.{role}]"] + [f"{k} = {_toml(table[k])}" for k in sorted(table)]
    for fit in sorted(profile.collectives, key=lambda f: (f.op, f.link, f.algorithm)):
        lines += ["", "[[collectives]]"] + [f"{k} = {_toml(getattr(fit, k))}" for k in FIT_KEYS]
    for key in sorted(profile.fits):
        info = profile.fits[key]
        lines += ["", f"[fit.{json.dumps(key)}]", f"samples = {info.samples}",
                  f"rel_error = {_toml(info.rel_error)}", f"source = {_toml(info.source)}"]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml(value: Any) -> str:
    """A TOML literal for a str, bool, int, float or a list/tuple of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} to TOML")
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
