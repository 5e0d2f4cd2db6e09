"""Prices of the host-side ops of offloading: PCIe copies, NVMe reads/writes and CPU Adam.

Sharing (stated approximation): all GPUs of a node offload at the same time (symmetric data
parallelism), so each copy gets the per-GPU bandwidth of :func:`topo.memory.host_copy_GBps`
with ``gpus_copying = gpus_per_node`` — the GPU's PCIe link, its PCIe switch's uplink divided by
the GPUs under that switch, and the tier's bandwidth divided by the node's GPUs — rather than a
shared channel on the engine (a folded simulation holds one rank per pipeline stage). Likewise
the node's NVMe bandwidth, its DRAM bandwidth and its cores (CPU Adam) are divided by the GPUs
of the node. NVMe traffic also crosses DRAM: an NVMe transfer runs at the slower of the NVMe
share and the DRAM share. Units: bytes, seconds, GB/s (1e9 bytes/s). With ``fidelity="flow"``
the copies run as flows on the node's links instead (:mod:`sim.flow.host_copies`); CPU Adam keeps
this price.
"""

from __future__ import annotations

from core.errors import invalid
from core.taskgraph import Op
from core.vocab import HOST_OP_CLASSES, OpClass
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from topo.cluster import ClusterSpec
from topo.memory import host_copy_GBps


class HostOpPricer:
    """Seconds of the host ops of one cluster's GPUs (see the module docstring for sharing)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self.gpus = cluster.gpus_per_node

    def pcie_GBps(self, direction: str) -> float:
        """Per-GPU GB/s of a copy between a GPU and CPU DRAM with every GPU of the node copying."""
        return host_copy_GBps(self.cluster, "dram", direction, self.gpus)

    def nvme_GBps(self, direction: str) -> float:
        """Per-GPU GB/s of an NVMe read ("read") or write ("write"), DRAM crossing included."""
        host = self.cluster.host
        tier = host.nvme_read_GBps if direction == "read" else host.nvme_write_GBps
        if host.nvme_bytes == 0 or tier <= 0:
            raise invalid("offload_device", "nvme", f"cluster {self.cluster.name!r} has no local NVMe")
        return min(tier, host.dram_GBps) / self.gpus

    def cpu_adam_params_per_s(self) -> float:
        """Parameters per second one GPU's CPU Adam updates: the node's cores shared by its GPUs."""
        host = self.cluster.host
        return host.cpu_cores * host.cpu_adam_params_per_core_s / self.gpus

    def cpu_adam_s(self, params: float) -> float:
        """CPU Adam over ``params`` parameters: the slower of the cores and the DRAM traffic."""
        dram_GBps = self.cluster.host.dram_GBps / self.gpus
        return max(params / self.cpu_adam_params_per_s(),
                   CPU_ADAM_BYTES_PER_PARAM * params / (dram_GBps * 1e9))

    def op_time_s(self, op: Op) -> float:
        """Seconds of one host op (op_class in :data:`core.vocab.HOST_OP_CLASSES`)."""
        if op.op_class == OpClass.PCIE_TO_HOST:
            return op.bytes / (self.pcie_GBps("to_host") * 1e9)
        if op.op_class == OpClass.PCIE_TO_DEVICE:
            return op.bytes / (self.pcie_GBps("to_device") * 1e9)
        if op.op_class == OpClass.NVME_READ:
            return op.bytes / (self.nvme_GBps("read") * 1e9)
        if op.op_class == OpClass.NVME_WRITE:
            return op.bytes / (self.nvme_GBps("write") * 1e9)
        if op.op_class == OpClass.CPU_ADAM:
            return self.cpu_adam_s(op.bytes / CPU_ADAM_BYTES_PER_PARAM)
        raise invalid("op_class", op.op_class, "expected one of " + ", ".join(HOST_OP_CLASSES))
