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
- Given the simulated snapshot (:mod:`sim.run.snapshot`: the copy as a task on the job's
  timeline), the copy's seconds and the part of it training waits for come from there instead;
  the formula's copy stays beside them (``d2h_formula_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.vocab import Offload, Runtime
from schedules.memory import FP32_BYTES, fsdp_state_bytes, model_state_bytes, optimizer_state_bytes
from sim.job import Job
from sim.run.inputs import CheckpointMode, StorageSpec, bad
from sim.run.snapshot import SnapshotTiming
from topo.memory import host_copy_GBps

GB = 1e9


@dataclass(frozen=True, kw_only=True)
class CheckpointCost:
    """One checkpoint of a job.

    Attributes:
        rank_bytes: largest device-to-host bytes of one rank.
        total_bytes: bytes written to storage (one copy of the model state).
        d2h_s: the device-to-host snapshot, seconds (the simulated span when there is one).
        d2h_blocking_s: the part of it training waits for (the copy itself without a simulation).
        d2h_formula_s: the copy by the formula (module docstring).
        write_s: writing ``total_bytes`` out of the hosts, seconds.
        read_s: reading it back on a restart, seconds.
        blocking_s: seconds training waits per checkpoint (by mode).
        persist_s: seconds after the snapshot until the checkpoint is durable (async/memory).
    """

    rank_bytes: float
    total_bytes: float
    d2h_s: float
    d2h_blocking_s: float
    d2h_formula_s: float
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


def checkpoint_cost(job: Job, rank_bytes: float, storage: StorageSpec, mode: CheckpointMode,
                    snapshot: SnapshotTiming | None = None) -> CheckpointCost:
    """The cost of one checkpoint of ``job`` whose largest rank holds ``rank_bytes`` of state, the
    device-to-host part from ``snapshot`` when simulated; a checkpoint that does not fit the
    storage (``keep`` copies) is a one-line error."""
    total = saved_bytes(job)
    if storage.capacity_bytes and total * storage.keep > storage.capacity_bytes:
        raise bad("storage.capacity_bytes", storage.capacity_bytes,
                  f"{storage.keep} checkpoints of {total:.4g} bytes do not fit")
    c = job.cluster
    formula = rank_bytes / (host_copy_GBps(c, "dram", "to_host", c.gpus_per_node) * GB)
    d2h, wait = (formula, formula) if snapshot is None else (snapshot.copy_s, snapshot.blocking_s)
    snap = {"rank_bytes": rank_bytes, "total_bytes": total, "d2h_s": d2h, "d2h_blocking_s": wait,
            "d2h_formula_s": formula}
    if mode is CheckpointMode.MEMORY:
        peer = peer_copy_s(job, total)
        return CheckpointCost(**snap, write_s=peer, read_s=peer, blocking_s=wait, persist_s=peer)
    write = transfer_s(job, total, storage)
    if mode is CheckpointMode.SYNC:
        return CheckpointCost(**snap, write_s=write, read_s=write, blocking_s=wait + write, persist_s=0.0)
    return CheckpointCost(**snap, write_s=write, read_s=write, blocking_s=wait, persist_s=write)
