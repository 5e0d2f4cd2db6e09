"""Expert parallelism: experts split over EP ranks, sharded over the expert-data-parallel group.

Layout (Megatron-Core's): expert-parallel ranks are data-parallel ranks. The data-parallel
group of size dp is split into (edp, ep) with edp = dp / ep, EP innermost: the ``ep`` ranks of an
EP group train on different data and each holds E / ep of every MoE layer's experts; the ``edp``
ranks holding the same experts form the expert-data-parallel group. Everything but the routed
experts (attention, norms, router, shared experts, embedding, head) stays data-parallel over all
dp ranks, exactly as in a dense model.

Expert gradients: an expert's gradient on its rank sums the contributions of the tokens of all
ep peers (the all-to-all's backward brings them), each the gradient of that peer's mean loss.
The global loss is the mean over the dp ranks, so the expert gradient is that sum over the edp
group divided by dp = edp x ep. Each MoE layer's experts are their own FSDP2 unit over the edp
mesh (``fully_shard`` for ZeRO-2/3: sharded over edp; ``replicate`` for ZeRO-0: replicated,
gradients all-reduced over edp), which averages over edp as usual; the experts scale their
weights' gradients by 1/ep in backward (``Experts.grad_scale``). Why not FSDP2's
``set_gradient_divide_factor(dp)``: NCCL runs it as PREMUL_SUM, which gloo lacks, and in torch
2.13 its gloo fallback (``set_force_sum_reduction_for_comms``) divides twice for ``replicate``
and for a one-rank mesh (measured with a factor of 4: gradients divided by 16).

Under tensor parallelism the MoE block computes on the rank's own sequence shard (no TP
collectives inside it): its parameters are replicated over TP (:class:`MoETensorParallel`) and
their gradients summed over TP, as for sequence-parallel norms. EP peers share a TP index.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_module
from torch.distributed.tensor.parallel import ParallelStyle

from profiler.trainer.model import Transformer
from profiler.trainer.moe import Experts, MoE
from profiler.trainer.torch_compat import process_group_info, replicate, unflatten_mesh

EXPERT_DIMS = ("edp", "ep")


def expert_mesh(mesh: DeviceMesh, ep: int) -> DeviceMesh | None:
    """The (edp, ep) mesh over this rank's data-parallel group; None without expert parallelism."""
    if ep == 1:
        return None
    dp_mesh = mesh["dp"]
    return unflatten_mesh(dp_mesh, (dp_mesh.size() // ep, ep), EXPERT_DIMS)


def moe_blocks(model: Transformer) -> list[MoE]:
    """The MoE feed-forward blocks of ``model`` (a stage), in layer order."""
    return [block.mlp for block in model.blocks() if isinstance(block.mlp, MoE)]


def apply_expert_parallel(model: Transformer, experts_mesh: DeviceMesh) -> None:
    """Keep this EP rank's slice of every MoE layer's experts and route over the EP group."""
    ep_mesh = experts_mesh["ep"]
    rank, size = ep_mesh.get_local_rank(), ep_mesh.size()
    for moe in moe_blocks(model):
        _keep_slice(moe.experts, rank, size)
        moe.experts.grad_scale = 1.0 / size
        moe.ep_group = ep_mesh.get_group()


def _keep_slice(experts: Experts, rank: int, size: int) -> None:
    """Replace the stacked weights by experts rank*E/size .. (rank+1)*E/size - 1."""
    per_rank = experts.num_experts // size
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    for name in ("w1", "w3", "w2"):
        setattr(experts, name, nn.Parameter(getattr(experts, name).detach()[part].clone()))
    experts.first += rank * per_rank


def apply_expert_data_parallel(model: Transformer, experts_mesh: DeviceMesh, *, zero: int) -> None:
    """Make each MoE layer's routed experts an FSDP2 unit over the edp group (before the
    stage's own data parallelism, which then leaves them out)."""
    edp_mesh = experts_mesh["edp"]
    for moe in moe_blocks(model):
        if zero >= 2:
            fully_shard(moe.experts, mesh=edp_mesh, reshard_after_forward=zero == 3)
        else:
            replicate(moe.experts, mesh=edp_mesh)


def expert_rank_info(experts_mesh: DeviceMesh | None) -> dict[str, dict[str, Any]]:
    """Coordinates and process groups of the edp and ep dims (for the run manifest)."""
    if experts_mesh is None:
        return {"coords": {}, "groups": {}}
    return {"coords": {dim: experts_mesh[dim].get_local_rank() for dim in EXPERT_DIMS},
            "groups": {dim: process_group_info(experts_mesh[dim].get_group()) for dim in EXPERT_DIMS}}


class MoETensorParallel(ParallelStyle):
    """An MoE block under TP + SP: parameters replicated over TP, computing on the rank's
    sequence shard (its input DTensor's local tensor), returning a local tensor as the dense
    MLP's row-parallel output does."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        distribute_module(module, device_mesh)  # every parameter a replicated DTensor
        module.register_forward_pre_hook(_local_input)
        return module


def _local_input(module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The sequence shard of each DTensor input (its gradient flows back as Shard(1))."""
    return tuple(x.to_local() if isinstance(x, DTensor) else x for x in inputs)
