"""Data parallelism with FSDP2: ``fully_shard`` for ZeRO-2/3, ``replicate`` for plain DP/ZeRO-1.

Each transformer block is its own FSDP unit (its parameters are gathered and its gradients
reduced together), then the stage module is wrapped for the rest (embedding, head), as
torchtitan does. ZeRO-3 reshards parameters after forward; ZeRO-2 keeps them unsharded until
the end of backward (``reshard_after_forward=False``) so it only shards gradients and optimizer
states. ZeRO-0/1 replicate parameters and all-reduce gradients; ZeRO-1 additionally shards the
optimizer states (see :mod:`profiler.trainer.zero1`).

``offload="optimizer"`` (ZeRO-2/3) passes FSDP2's ``CPUOffloadPolicy``: each unit's sharded
parameters, gradients and (hence) optimizer states live in host memory, the optimizer steps on
the CPU, parameters are copied host-to-device before their all-gather and gradients
device-to-host after their reduce-scatter. Host memory is pinned only on CUDA (page-locked
memory makes those copies asynchronous DMA; on a CPU device there is no copy at all: the
tensors are already on the host and ``Tensor.to("cpu")`` returns them unchanged).

``comm_delay_s`` (``--slow-comm dp:SECONDS``, ZeRO-2/3) makes every FSDP2 all-gather and
reduce-scatter complete that much later (see :class:`profiler.trainer.torch_compat.DelayLine`).
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

from core.vocab import Offload
from profiler.trainer.model import Transformer
from profiler.trainer.torch_compat import DelayLine, delay_fsdp_comms, replicate


def offload_policy(offload: str, device_type: str) -> OffloadPolicy:
    """FSDP2's policy for ``offload`` (none | optimizer); pinned host memory only on CUDA."""
    if offload == Offload.NONE:
        return OffloadPolicy()
    if offload == Offload.OPTIMIZER:
        return CPUOffloadPolicy(pin_memory=device_type == "cuda")
    raise ValueError(f"offload={offload!r} is invalid: expected one of none, optimizer")


def apply_data_parallel(model: Transformer, dp_mesh: DeviceMesh, *, zero: int,
                        comm_delay_s: float = 0.0, offload: str = "none") -> Transformer:
    """Wrap ``model`` (a stage) for data parallelism over ``dp_mesh`` per ZeRO stage 0-3,
    with FSDP2 CPU offload when ``offload="optimizer"`` (ZeRO-2/3 only)."""
    if offload != Offload.NONE and (zero < 2 or dp_mesh.size() == 1):
        raise ValueError(f"offload={offload!r} is invalid: needs FSDP2 (dp >= 2, zero 2 or 3)")
    if dp_mesh.size() == 1:
        return model
    if zero >= 2:
        reshard = zero == 3
        units = [*model.blocks(), model]
        policy = offload_policy(offload, dp_mesh.device_type)
        for unit in units:
            fully_shard(unit, mesh=dp_mesh, reshard_after_forward=reshard, offload_policy=policy)
        if comm_delay_s > 0:
            line = DelayLine(comm_delay_s)
            for unit in units:
                delay_fsdp_comms(unit, line)
    else:
        for block in model.blocks():
            replicate(block, mesh=dp_mesh)
        replicate(model, mesh=dp_mesh)
    return model
