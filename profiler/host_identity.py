"""Which machine a hardware profile was calibrated on, and whether this is the one.

A profile fitted by ``trainsim calibrate --microbench`` records the machine it ran on in its
``[profile]`` table: ``hostname``, ``cpu_model`` (``/proc/cpuinfo``'s first ``model name``) and
``host_id``, a digest of ``/etc/machine-id`` (unique per installed system; only a digest is
written, as systemd's machine-id(5) asks, so a committed profile does not publish the id). Two
virtual machines can share a hostname and a CPU model; their machine ids differ.

``trainsim validate RUN`` applies the default profile (``profiles/this-host.toml``) only where
:func:`other_host` finds nothing against it: a profile that records no host, or another one, is
another machine's (a run recorded here would be compared with that machine's speeds).
"""

from __future__ import annotations

import hashlib
import platform
import socket
from collections.abc import Mapping
from pathlib import Path

MACHINE_ID = Path("/etc/machine-id")
CPUINFO = Path("/proc/cpuinfo")
IDENTITY_KEYS = ("host_id", "hostname", "cpu_model")


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform says, else ""."""
    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _host_id() -> str:
    """A digest of this system's machine id (16 hex digits), or "" where there is none."""
    try:
        machine_id = MACHINE_ID.read_text().strip()
    except OSError:
        return ""
    return hashlib.sha256(f"trainsim host:{machine_id}".encode()).hexdigest()[:16] if machine_id else ""


def host_identity() -> dict[str, str]:
    """This machine's ``hostname``, ``cpu_model`` and ``host_id`` (empty values left out)."""
    found = {"host_id": _host_id(), "hostname": socket.gethostname(), "cpu_model": _cpu_model()}
    return {k: v for k, v in found.items() if v}


def other_host(recorded: Mapping[str, str], here: Mapping[str, str] | None = None) -> str | None:
    """Why a profile whose ``[profile]`` table is ``recorded`` is not this machine's (None: it is):
    it records none of :data:`IDENTITY_KEYS` that ``here`` (default: this host) has, or one differs."""
    here = host_identity() if here is None else here
    known = [k for k in IDENTITY_KEYS if recorded.get(k) and here.get(k)]
    if not known:
        return "it does not record the host it was calibrated on"
    for key in known:
        if recorded[key] != here[key]:
            return f"it was calibrated on {key} {recorded[key]!r}, this host has {here[key]!r}"
    return None
