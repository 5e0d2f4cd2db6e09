"""ZeRO stage 1: an optimizer whose states are sharded over the data-parallel ranks.

Gradients are all-reduced by replicated data parallelism as usual; each DP rank then keeps
optimizer states (AdamW's moments) for, and updates, only the parameters it owns (a greedy
balanced partition by size, as DeepSpeed's and torch's ``ZeroRedundancyOptimizer`` do), and
broadcasts them to the other DP ranks after its step (one flattened broadcast per owner).

Why not ``torch.distributed.optim.ZeroRedundancyOptimizer``: it broadcasts the parameters as
tensors, and with FSDP2's ``replicate`` (and TP) the parameters are DTensors, for which
``c10d.broadcast_`` has no sharding rule in torch 2.13. Here the broadcast moves each DTensor's
local tensor over the DP process group, which works with any TP/PP layout and backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn


def local_tensor(param: torch.Tensor) -> torch.Tensor:
    """The rank-local storage of a (DTensor or plain) parameter, without autograd."""
    with torch.no_grad():
        to_local = getattr(param, "to_local", None)
        return to_local() if to_local is not None else param


def partition(sizes: list[int], parts: int) -> list[int]:
    """Owner (0..parts-1) of each item: largest first onto the least-loaded part (stable)."""
    owners = [0] * len(sizes)
    load = [0] * parts
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        owner = min(range(parts), key=lambda p: (load[p], p))
        owners[index] = owner
        load[owner] += sizes[index]
    return owners


OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


class ZeroOneOptimizer:
    """ZeRO-1: ``make(owned_params)`` builds the local optimizer for this DP rank's share."""

    def __init__(self, params: Iterable[nn.Parameter], *, dp_group: dist.ProcessGroup,
                 make: OptimizerFactory) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.group = dp_group
        dp_size, dp_rank = dist.get_world_size(dp_group), dist.get_rank(dp_group)
        self.owners = partition([local_tensor(p).numel() for p in self.params], dp_size)
        self.sources = dist.get_process_group_ranks(dp_group)  # global rank of each DP rank
        mine = [p for p, owner in zip(self.params, self.owners, strict=True) if owner == dp_rank]
        self.inner = make(mine) if mine else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop all gradients (this rank's and the ones it does not own)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """Update the owned parameters, then broadcast every owner's parameters to its peers."""
        if self.inner is not None:
            self.inner.step()
        for dp_rank, source in enumerate(self.sources):
            owned = [local_tensor(p)
                     for p, o in zip(self.params, self.owners, strict=True) if o == dp_rank]
            if not owned:
                continue
            flat = torch.cat([t.reshape(-1) for t in owned])
            dist.broadcast(flat, src=source, group=self.group)
            for tensor, chunk in zip(owned, flat.split([t.numel() for t in owned]), strict=True):
                tensor.copy_(chunk.view_as(tensor))

    def state_bytes(self) -> int:
        """Bytes of optimizer state held by this rank."""
        if self.inner is None:
            return 0
        return sum(v.numel() * v.element_size() for s in self.inner.state.values()
                   for v in s.values() if isinstance(v, torch.Tensor))
