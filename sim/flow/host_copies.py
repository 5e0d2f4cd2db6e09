"""Offload copies as flows: which links a GPU <-> CPU DRAM copy or an NVMe transfer crosses.

A copy between a GPU and CPU DRAM goes up the GPU's PCIe link to its PCIe switch, the switch's
uplink to its CPU socket (the root complex) and that socket's memory channels; the way back for a
host-to-device copy. An NVMe read moves bytes from the drives through socket 0 into DRAM, a write
the other way (the drives' write bandwidth on that direction). In flow mode these copies share
their links max-min fairly with every other flow: with the copies of the other GPUs under the
same switch or socket (as many as copy at that moment, not an assumed all-at-once even split)
and with GPU <-> NIC traffic, which crosses the same GPU PCIe link and switch (GPUDirect RDMA).

Units: bytes; paths are vertex names of :mod:`topo.naming`.
"""

from __future__ import annotations

from core.errors import invalid
from core.vocab import HOST_OP_CLASSES, OpClass
from topo import naming
from topo.cluster import ClusterSpec

HOST_COPY_CLASSES = tuple(c for c in HOST_OP_CLASSES if c != OpClass.CPU_ADAM)  # transfers, not compute


def host_copy_vertices(spec: ClusterSpec, op_class: str, device: int) -> list[str]:
    """Vertices a copy of ``op_class`` made for ``device`` (a global GPU id) crosses, in the
    direction the bytes move."""
    node, local = spec.node_of(device), spec.local_of(device)
    if op_class in (OpClass.NVME_READ, OpClass.NVME_WRITE):
        path = [naming.nvme(node), naming.cpu(node, 0), naming.dram(node)]
        return path if op_class == OpClass.NVME_READ else path[::-1]
    if op_class not in (OpClass.PCIE_TO_HOST, OpClass.PCIE_TO_DEVICE):
        raise invalid("op_class", op_class, "expected one of " + ", ".join(HOST_COPY_CLASSES))
    switch = spec.switch_of_local(local)
    path = [naming.gpu(node, local), naming.pcie_switch(node, switch),
            naming.cpu(node, spec.socket_of_switch(switch)), naming.dram(node)]
    return path if op_class == OpClass.PCIE_TO_HOST else path[::-1]
