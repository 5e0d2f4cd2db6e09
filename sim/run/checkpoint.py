"""Checkpoint cost from the plan: bytes from the memory model, seconds from the cluster's paths.

- Bytes per rank copied device-to-host: the parameters and optimizer states that rank holds in HBM
  (:class:`sim.memory.MemoryBreakdown`, ZeRO/FSDP sharding included); gradients are not saved.
- Bytes written per checkpoint: one copy of the model state (replicas deduplicated, as
  distributed checkpointing writes each shard once): parameters in their storage dtype plus the
  optimizer states, per parameter as :mod:`schedules.memory` counts them (Megatron 2 + 12 bytes;
  FSDP2 fp32 sharded parameters 4 + 8).
- The device-to-host copy runs at :func:`topo.memory.host_copy_GBps` with every GPU of a node copying
  at once; the write is limited by each node's bandwidth to storage and by the storage system's
  aggregate bandwidth; a restart reads the checkpoint back the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.vocab import Offload, Runtime
from schedules.memory import FP32_BYTES, fsdp_state_bytes, model_state_bytes, optimizer_state_bytes
from sim.job import Job
from sim.run.inputs import CheckpointMode, StorageSpec, bad
from topo.memory import host_copy_GBps

GB = 1e9


@dataclass(frozen=True, kw_only=True)
class CheckpointCost:
    """One checkpoint of a job.

    Attributes:
        rank_bytes: largest device-to-host bytes of one rank.
        total_bytes: bytes written to storage (one copy of the model state).
        d2h_s: the device-to-host snapshot, seconds.
        write_s: writing ``total_bytes`` out of the hosts, seconds.
        read_s: reading it back on a restart, seconds.
        blocking_s: seconds training waits per checkpoint (by mode).
        persist_s: seconds after the snapshot until the checkpoint is durable (async/memory).
    """

    rank_bytes: float
    total_bytes: float
    d2h_s: float
    write_s: float
    read_s: float
    blocking_s: float
    persist_s: float


def saved_bytes(job: Job) -> float:
    """Bytes of one deduplicated checkpoint: parameters + optimizer states of the whole model."""
    plan, n = job.plan, float(job.model.num_params())
    if plan.framework == Runtime.TORCH and plan.zero == 3 and plan.offload == Offload.NONE:
        states = fsdp_state_bytes(n, 1, FP32_BYTES if plan.master_weights else plan.element_bytes)
    else:
        states = model_state_bytes(n, 0, 1, optimizer_bytes=optimizer_state_bytes(plan))
    return states.params + states.optimizer


def transfer_s(job: Job, total_bytes: float, storage: StorageSpec) -> float:
    """Seconds to move ``total_bytes`` between the nodes and storage (either way)."""
    aggregate = total_bytes / (storage.aggregate_GBps * GB)
    if storage.node_GBps <= 0:
        return aggregate
    return max(aggregate, total_bytes / job.cluster.nodes / (storage.node_GBps * GB))


def peer_copy_s(job: Job, total_bytes: float) -> float:
    """Seconds to copy each node's share to a peer's host memory over its NICs."""
    c = job.cluster
    if c.nic is None or c.nics_per_node == 0:
        return 0.0
    return total_bytes / c.nodes / (c.nic.effective_GBps * c.nics_per_node * GB)


def checkpoint_cost(job: Job, rank_bytes: float, storage: StorageSpec, mode: CheckpointMode) -> CheckpointCost:
    """The cost of one checkpoint of ``job`` whose largest rank holds ``rank_bytes`` of state;
    a checkpoint that does not fit the storage (``keep`` copies) is a one-line error."""
    total = saved_bytes(job)
    if storage.capacity_bytes and total * storage.keep > storage.capacity_bytes:
        raise bad("storage.capacity_bytes", storage.capacity_bytes,
                  f"{storage.keep} checkpoints of {total:.4g} bytes do not fit")
    c = job.cluster
    d2h = rank_bytes / (host_copy_GBps(c, "dram", "to_host", c.gpus_per_node) * GB)
    write = transfer_s(job, total, storage)
    if mode is CheckpointMode.SYNC:
        return CheckpointCost(rank_bytes=rank_bytes, total_bytes=total, d2h_s=d2h, write_s=write, read_s=write,
                              blocking_s=d2h + write, persist_s=0.0)
    if mode is CheckpointMode.ASYNC:
        return CheckpointCost(rank_bytes=rank_bytes, total_bytes=total, d2h_s=d2h, write_s=write, read_s=write,
                              blocking_s=d2h, persist_s=write)
    peer = peer_copy_s(job, total)
    return CheckpointCost(rank_bytes=rank_bytes, total_bytes=total, d2h_s=d2h, write_s=peer, read_s=peer,
                          blocking_s=d2h, persist_s=peer)
