"""Link specs: bandwidth per direction, latency and the achievable (NCCL) fraction of line rate.

Units: GB/s = 1e9 bytes/s per direction (links are full duplex), seconds. ``efficiency`` is the
fraction of ``bandwidth_GBps`` that NCCL's protocols achieve on the link (protocol overhead etc.);
it is a named field so calibration can override it with :meth:`LinkSpec.with_overrides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import (
    invalid,
    replace_checked,
    require_choice,
    require_number,
    require_positive_int,
)

LINK_KINDS = ("nvlink", "pcie", "infiniband", "efa", "ethernet", "cpu", "shm")


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """One kind of link.

    Attributes:
        name: preset name, e.g. "nvlink4", "ib-ndr".
        kind: nvlink | pcie | infiniband | efa | ethernet | cpu (socket interconnect) | shm (host memory).
        bandwidth_GBps: line rate per direction in GB/s (for NVLink: all of one GPU's links together).
        latency_s: latency of one traversal of one edge of this kind in the cluster graph, seconds.
            A GPU-to-GPU hop through a switch crosses two edges.
        efficiency: achievable fraction of ``bandwidth_GBps`` for NCCL traffic.
        nvls_efficiency: NVLink only: achievable fraction of line rate for NVLink SHARP (in-switch
            reduction) traffic; 0.0 = no NVLS on this NVLink/NVSwitch generation.
        links: physical links bundled in this link (NVLink: links per GPU, e.g. 18 on H100; NCCL
            builds about one ring channel per NVLink). 1 for other kinds.
        ll_protocols: NICs only: writes arrive in order in 128-byte units, so NCCL may run its
            LL/LL128 protocols across the network (False: Simple only, as aws-ofi-nccl forces
            NCCL_PROTO=simple on EFA without in-order delivery).
    """

    name: str
    kind: str
    bandwidth_GBps: float
    latency_s: float
    efficiency: float
    nvls_efficiency: float = 0.0
    links: int = 1
    ll_protocols: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise invalid("name", self.name, "expected a non-empty string")
        require_choice("kind", self.kind, LINK_KINDS)
        require_number("bandwidth_GBps", self.bandwidth_GBps, low=0.0, low_inclusive=False)
        require_number("latency_s", self.latency_s)
        require_number("efficiency", self.efficiency, low=0.0, high=1.0, low_inclusive=False)
        require_number("nvls_efficiency", self.nvls_efficiency, low=0.0, high=1.0)
        require_positive_int("links", self.links)
        if not isinstance(self.ll_protocols, bool):
            raise invalid("ll_protocols", self.ll_protocols, "expected true or false")
        if self.nvls_efficiency > 0.0 and self.kind != "nvlink":
            raise invalid("nvls_efficiency", self.nvls_efficiency, "NVLS exists only on nvlink links")

    @property
    def gbps(self) -> float:
        """Line rate per direction in gigabits/s."""
        return self.bandwidth_GBps * 8.0

    @property
    def effective_GBps(self) -> float:
        """Achievable bandwidth per direction, GB/s (line rate x efficiency)."""
        return self.bandwidth_GBps * self.efficiency

    def with_overrides(self, overrides: Mapping[str, Any]) -> LinkSpec:
        """A copy with some fields replaced (validated); an unknown field name is a ValueError."""
        return replace_checked(self, overrides)  # type: ignore[no-any-return]
