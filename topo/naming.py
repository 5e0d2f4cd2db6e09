"""Vertex names of the cluster graph, shared by :mod:`topo.graph` and :mod:`topo.routing`.

Per-node vertices are prefixed ``n<node>.``; fabric vertices are ``leaf<block>`` (fat-tree),
``leaf<block>.rail<r>`` (rail-optimized), ``pod<p>`` (three-tier Clos) and ``core``.
"""

from __future__ import annotations


def gpu(node: int, local: int) -> str:
    """A device slot (a GPU, or a CPU process for intra_node='host')."""
    return f"n{node}.gpu{local}"


def nvswitch(node: int) -> str:
    """The node's NVSwitch fabric, aggregated into one non-blocking vertex."""
    return f"n{node}.nvswitch"


def pcie_switch(node: int, index: int) -> str:
    """A PCIe switch (or CPU root port)."""
    return f"n{node}.pcie{index}"


def cpu(node: int, socket: int) -> str:
    """A CPU socket (PCIe root complex)."""
    return f"n{node}.cpu{socket}"


def nic(node: int, index: int) -> str:
    """A NIC vertex (possibly several ports grouped)."""
    return f"n{node}.nic{index}"


def dram(node: int) -> str:
    """The node's CPU DRAM."""
    return f"n{node}.dram"


def nvme(node: int) -> str:
    """The node's local NVMe drives."""
    return f"n{node}.nvme"


def leaf(block: int, rail: int, rail_optimized: bool) -> str:
    """A leaf switch: one per block on a fat-tree, one per (block, rail) when rail-optimized."""
    return f"leaf{block}.rail{rail}" if rail_optimized else f"leaf{block}"


def pod(index: int) -> str:
    """A pod's aggregation layer (three-tier Clos), aggregated into one non-blocking vertex."""
    return f"pod{index}"


CORE = "core"
