"""Data parallelism with FSDP2: ``fully_shard`` for ZeRO-2/3, ``replicate`` for plain DP/ZeRO-1.

Each transformer block is its own FSDP unit (its parameters are gathered and its gradients
reduced together), then the stage module is wrapped for the rest (embedding, head), as
torchtitan does. ZeRO-3 reshards parameters after forward; ZeRO-2 keeps them unsharded until
the end of backward (``reshard_after_forward=False``) so it only shards gradients and optimizer
states. ZeRO-0/1 replicate parameters and all-reduce gradients; ZeRO-1 additionally shards the
optimizer states (see :mod:`profiler.trainer.zero1`).

``comm_delay_s`` (``--slow-comm dp:SECONDS``, ZeRO-2/3) makes every FSDP2 all-gather and
reduce-scatter complete that much later (see :class:`profiler.trainer.torch_compat.DelayLine`).
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from profiler.trainer.model import Transformer
from profiler.trainer.torch_compat import DelayLine, delay_fsdp_comms, replicate


def apply_data_parallel(model: Transformer, dp_mesh: DeviceMesh, *, zero: int,
                        comm_delay_s: float = 0.0) -> Transformer:
    """Wrap ``model`` (a stage) for data parallelism over ``dp_mesh`` per ZeRO stage 0-3."""
    if dp_mesh.size() == 1:
        return model
    if zero >= 2:
        reshard = zero == 3
        units = [*model.blocks(), model]
        for unit in units:
            fully_shard(unit, mesh=dp_mesh, reshard_after_forward=reshard)
        if comm_delay_s > 0:
            line = DelayLine(comm_delay_s)
            for unit in units:
                delay_fsdp_comms(unit, line)
    else:
        for block in model.blocks():
            replicate(block, mesh=dp_mesh)
        replicate(model, mesh=dp_mesh)
    return model
