"""Data parallelism with FSDP2: ``fully_shard`` for ZeRO-2/3, ``replicate`` for plain DP/ZeRO-1.

Each transformer block is its own FSDP unit (its parameters are gathered and its gradients
reduced together), then the stage module is wrapped for the rest (embedding, head), as
torchtitan does. ZeRO-3 reshards parameters after forward; ZeRO-2 keeps them unsharded until
the end of backward (``reshard_after_forward=False``) so it only shards gradients and optimizer
states. ZeRO-0/1 replicate parameters and all-reduce gradients; ZeRO-1 additionally shards the
optimizer states (see :mod:`profiler.trainer.zero1`).
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from profiler.trainer.model import Transformer
from profiler.trainer.torch_compat import replicate


def apply_data_parallel(model: Transformer, dp_mesh: DeviceMesh, *, zero: int) -> Transformer:
    """Wrap ``model`` (a stage) for data parallelism over ``dp_mesh`` per ZeRO stage 0-3."""
    if dp_mesh.size() == 1:
        return model
    if zero >= 2:
        reshard = zero == 3
        for block in model.blocks():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)
    else:
        for block in model.blocks():
            replicate(block, mesh=dp_mesh)
        replicate(model, mesh=dp_mesh)
    return model
