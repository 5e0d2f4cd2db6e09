"""Token dispatch and combine of an MoE layer, over expert-parallel ranks with all-to-all.

Each token's ``top_k`` (token, expert) assignments are sorted by expert (a stable sort, so the
order is deterministic). Without expert parallelism the local experts take them in that order.
With it, expert ``e`` lives on EP rank ``e // (E / ep)``, and:

1. counts: ``all_to_all_single`` of the per-expert assignment counts, so every rank knows how
   many rows it receives from each peer for each of its experts;
2. dispatch: ``all_to_all_single`` of the sorted rows with those (uneven) split sizes;
3. the local experts run on the received rows, regrouped by expert;
4. combine: the inverse ``all_to_all_single`` returns each output to its token's rank, where the
   ``top_k`` outputs are summed, weighted by the router probabilities.

The exchange is an autograd function whose backward is the transposed all-to-all (splits
swapped). Rows are only ever permuted (never gathered twice from one source), so the backward
has no scatter-add and is deterministic on GPU too. The split sizes are read on the host (a
device synchronisation on GPU, as in Megatron-Core's all-to-all dispatcher). gloo implements ``all_to_all_single`` with uneven splits on CPU in torch 2.13 (checked),
as NCCL does on GPU, so the same code runs on both. The trace shows the calls as
``_c10d_functional::all_to_all_single`` then ``_c10d_functional::wait_tensor`` (the transfer:
``gloo:all_to_all`` on gloo's worker thread), which the trace parser reads as kind ``all_to_all``, inside ``trainsim:moe dispatch`` / ``trainsim:moe combine`` ranges.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.profiler import record_function

DISPATCH = "trainsim:moe dispatch"
COMBINE = "trainsim:moe combine"


class ExpertsFn(Protocol):
    """Local experts: rows grouped by expert, ``counts[e]`` rows each -> their outputs."""

    @property
    def num_experts(self) -> int:
        """Experts held here."""

    def __call__(self, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor: ...


class AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of rows with uneven splits; backward sends gradients back."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, out_splits: list[int], in_splits: list[int],
                group: dist.ProcessGroup) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        return exchange(rows, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        out_splits, in_splits = ctx.splits
        return exchange(grad, in_splits, out_splits, ctx.group), None, None, None


def exchange(rows: torch.Tensor, out_splits: list[int], in_splits: list[int],
             group: dist.ProcessGroup) -> torch.Tensor:
    """Send ``in_splits[r]`` consecutive rows to peer r, receive ``out_splits[r]`` from it.

    A functional collective followed by its ``wait_tensor``, not ``dist.all_to_all_single``:
    the latter waits for the transfer in Python after the ``c10d::alltoall_base_`` call returns,
    where the profiler records no op, so the wait fell inside the enclosing autograd function's
    range (``AllToAll``, ``AllToAllBackward``) and was parsed as compute (56 of the 112 ms of
    rank 0's "compute" per step in the first recording). ``_c10d_functional::wait_tensor`` is a
    collective call to the trace parser (:func:`profiler.kineto.names.is_comm_range_name`), as
    for DTensor's collectives, so the thread's time blocked on the exchange is communication.
    """
    out = torch.ops._c10d_functional.all_to_all_single(rows.contiguous(), out_splits, in_splits, group.group_name)
    return torch.ops._c10d_functional.wait_tensor(out)


def route_tokens(tokens: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor,
                 experts: ExpertsFn, *, num_experts: int,
                 group: dist.ProcessGroup | None) -> torch.Tensor:
    """sum_k weights[:, k] * expert_{chosen[:, k]}(tokens), the experts spread over ``group``.

    ``tokens``: (n, h); ``chosen``, ``weights``: (n, top_k) global expert ids and their weights.
    """
    n, top_k = chosen.shape
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = tokens.repeat_interleave(top_k, dim=0)[order]  # a permutation: deterministic backward
    counts = torch.bincount(flat, minlength=num_experts)
    if group is None or dist.get_world_size(group) == 1:
        out = experts(rows, counts.tolist())
    else:
        out = _run_remote(rows, counts, experts, group)
    unsorted = out[torch.argsort(order)]
    return (unsorted.view(n, top_k, -1) * weights.unsqueeze(-1)).sum(dim=1)


def _run_remote(rows: torch.Tensor, counts: torch.Tensor, experts: ExpertsFn,
                group: dist.ProcessGroup) -> torch.Tensor:
    """Dispatch ``rows`` (sorted by global expert, ``counts`` per expert) to the experts' ranks,
    run the local experts on what arrives, and return the outputs in ``rows``' order."""
    ep, local = dist.get_world_size(group), experts.num_experts
    with record_function(DISPATCH):
        send = counts.view(ep, local)
        recv = exchange(send, [1] * ep, [1] * ep, group)  # recv[r, e]: rows from peer r for my e
        send_splits, recv_splits = send.sum(dim=1).tolist(), recv.sum(dim=1).tolist()
        received = AllToAll.apply(rows, recv_splits, send_splits, group)
    expert_of_row = torch.arange(local, device=rows.device).repeat(ep).repeat_interleave(recv.flatten())
    by_expert = torch.argsort(expert_of_row, stable=True)
    out = experts(received[by_expert], recv.sum(dim=0).tolist())
    with record_function(COMBINE):
        return AllToAll.apply(out[torch.argsort(by_expert)], send_splits, recv_splits, group)
