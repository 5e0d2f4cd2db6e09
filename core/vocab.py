"""The closed vocabularies: lanes, kinds, phases, op classes, collectives, runtimes, offload.

``StrEnum`` members are strings (``Lane.COMPUTE == "compute"``), so Timelines, tables and JSON
keep plain names while code cannot misspell one. Outside this module nothing compares a value
with one of these names written as a literal (``tests/core/test_vocabulary_literals.py``).
"""

from __future__ import annotations

from enum import StrEnum


class Lane(StrEnum):
    """The stream a task runs on (and the Timeline lane its spans are drawn on)."""

    COMPUTE = "compute"
    TP = "comm.tp"
    PP = "comm.pp"
    DP = "comm.dp"
    CP = "comm.cp"
    EP = "comm.ep"
    MEMCPY = "memcpy"
    HOST = "host"
    COMM = "comm"  # a measured collective whose group the trace parser could not map to a dimension


class Kind(StrEnum):
    """What a task or span is (the Timeline's ``kind`` column)."""

    FWD = "fwd"
    BWD = "bwd"
    BWD_INPUT = "bwd_input"
    BWD_WEIGHT = "bwd_weight"
    OPTIMIZER = "optimizer"
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND = "send"
    RECV = "recv"
    OFFLOAD = "offload"
    OTHER = "other"


class Phase(StrEnum):
    """A pipeline action's pass: forward, backward (its input-gradient half when W is split off),
    weight gradient."""

    F = "F"
    B = "B"
    W = "W"


class OpClass(StrEnum):
    """How an op is priced (:mod:`sim.pricing`)."""

    GEMM = "gemm"
    ATTENTION = "attention"
    ACTIVATION = "activation"
    ELEMENTWISE = "elementwise"
    OPTIMIZER = "optimizer"
    ALLOC = "alloc"
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    P2P = "p2p"
    FIXED = "fixed"
    STEP = "step"
    ACTION = "action"
    PCIE_TO_HOST = "pcie_to_host"
    PCIE_TO_DEVICE = "pcie_to_device"
    NVME_READ = "nvme_read"
    NVME_WRITE = "nvme_write"
    CPU_ADAM = "cpu_adam"
    HOST_SYNC = "host_sync"  # the host waits for the GPU (sim.host_sync)
    TRANSFER = "transfer"  # a replayed collective's data movement after its rendezvous (fixed duration)
    SLOT = "slot"  # a placeholder the explore template fills in (its ``layer`` holds the slot number)
    RANK_LOOP = "rank_loop"  # host time of a call built by a Python loop over a group's ranks (sim.rank_loops)
    RANK_COPIES = "rank_copies"  # one copy kernel per rank of a group: a list-API collective's (sim.rank_loops)


class Collective(StrEnum):
    """A collective communication operation (NCCL's and gloo's names, in NCCL's order)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all_to_all"


class Runtime(StrEnum):
    """Whose pipeline and data-parallel runtime a plan models (``ParallelPlan.framework``)."""

    MEGATRON = "megatron"  # Megatron-LM/DeepSpeed: DDP or the distributed optimizer, eager sends
    TORCH = "torch"  # FSDP2 units and torch.distributed.pipelining (the included trainer)


class Offload(StrEnum):
    """What ZeRO-Offload/Infinity moves off the GPU (``ParallelPlan.offload``)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    PARAMS = "params"


class OffloadDevice(StrEnum):
    """Where offloaded states live (``ParallelPlan.offload_device``)."""

    CPU = "cpu"
    NVME = "nvme"


class GemmRole(StrEnum):
    """Which of a linear layer's three GEMMs a matmul op is (what FP8 training quantizes around it,
    :mod:`schedules.fp8`): the forward with its input from a norm (``FPROP_NORMED``: a fused
    norm-and-cast kernel can produce it) or from another op, the input gradient, the weight gradient."""

    FPROP = "fprop"
    FPROP_NORMED = "fprop_normed"
    DGRAD = "dgrad"
    WGRAD = "wgrad"


KINDS = tuple(Kind)
COLLECTIVES = tuple(Collective)
COLLECTIVE_KINDS = (Kind.ALL_REDUCE, Kind.ALL_GATHER, Kind.REDUCE_SCATTER, Kind.ALL_TO_ALL, Kind.BROADCAST)
COMPUTE_CLASSES = (OpClass.GEMM, OpClass.ATTENTION, OpClass.ELEMENTWISE, OpClass.ACTIVATION, OpClass.OPTIMIZER)
COLLECTIVE_OPS = (OpClass.ALL_REDUCE, OpClass.ALL_GATHER, OpClass.REDUCE_SCATTER, OpClass.ALL_TO_ALL,
                  OpClass.BROADCAST)
HOST_OP_CLASSES = (OpClass.PCIE_TO_HOST, OpClass.PCIE_TO_DEVICE, OpClass.NVME_READ, OpClass.NVME_WRITE,
                   OpClass.CPU_ADAM)
BACKWARD_KINDS = (Kind.BWD, Kind.BWD_INPUT)
PHASE_KIND = {Phase.F: Kind.FWD, Phase.W: Kind.BWD_WEIGHT}


def phase_kind(phase: str, split_backward: bool) -> Kind:
    """The Timeline kind of an action's compute: fwd, bwd (bwd_input when W is split off), bwd_weight."""
    if phase == Phase.B:
        return Kind.BWD_INPUT if split_backward else Kind.BWD
    return PHASE_KIND[Phase(phase)]

