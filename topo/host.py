"""Host memory tiers of one node: CPU DRAM and local NVMe (reached from the GPUs over PCIe).

Units: bytes, GB/s (1e9 bytes/s). HBM per GPU lives on :class:`topo.device.DeviceSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import (
    replace_checked,
    require_nonnegative_int,
    require_number,
    require_positive_int,
)


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """CPU side of one node.

    Attributes:
        cpu_sockets: CPU sockets (each is a PCIe root complex; sockets are joined by the
            cluster's ``socket_link``).
        cpu_cores: physical cores per node (all sockets).
        dram_bytes: CPU DRAM capacity per node, bytes.
        dram_GBps: CPU DRAM peak bandwidth per node (all sockets), GB/s.
        nvme_bytes: local NVMe capacity per node, bytes (0 = none).
        nvme_read_GBps, nvme_write_GBps: sequential NVMe bandwidth per node (all drives), GB/s.
        compute_capacity: how many processes' worth of compute the node's cores run at once
            (each process single-threaded); 0 = ``cpu_cores``. Lower than the core count when
            the cores share execution units (SMT siblings) or a hypervisor's time.
        sched_delay_s: extra wait of every blocking communication call (collective or
            send/receive) per unit of oversubscription, ranks on the node / compute capacity - 1,
            seconds: with more runnable processes than cores, the peer that must take part is
            often not running and has to be scheduled first (time slicing, which the fluid
            sharing of the cores does not capture).
        cpu_adam_params_per_core_s: parameters one core updates per second in a vectorized
            CPU Adam step (ZeRO-Offload's CPU-Adam), all cores working on one shard at a time.
            Default 8e7: Ren et al. 2021 (ZeRO-Offload, USENIX ATC), Table 3, report CPU-Adam
            updating 10B parameters in about 2.6 s on a DGX-2 host (48 Xeon cores), i.e.
            ~3.9e9 parameters/s per node; a calibration profile may override it.
    """

    cpu_sockets: int = 2
    cpu_cores: int
    dram_bytes: int
    dram_GBps: float
    nvme_bytes: int = 0
    nvme_read_GBps: float = 0.0
    nvme_write_GBps: float = 0.0
    compute_capacity: float = 0.0
    sched_delay_s: float = 0.0
    cpu_adam_params_per_core_s: float = 8.0e7

    def __post_init__(self) -> None:
        require_positive_int("cpu_sockets", self.cpu_sockets)
        require_positive_int("cpu_cores", self.cpu_cores)
        require_positive_int("dram_bytes", self.dram_bytes)
        require_number("dram_GBps", self.dram_GBps, low=0.0, low_inclusive=False)
        require_nonnegative_int("nvme_bytes", self.nvme_bytes)
        require_number("nvme_read_GBps", self.nvme_read_GBps)
        require_number("nvme_write_GBps", self.nvme_write_GBps)
        require_number("compute_capacity", self.compute_capacity)
        require_number("sched_delay_s", self.sched_delay_s)
        require_number("cpu_adam_params_per_core_s", self.cpu_adam_params_per_core_s, low=0.0, low_inclusive=False)

    def with_overrides(self, overrides: Mapping[str, Any]) -> HostSpec:
        """A copy with some fields replaced (validated); an unknown field name is a ValueError."""
        return replace_checked(self, overrides)  # type: ignore[no-any-return]
