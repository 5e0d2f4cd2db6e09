"""Tensor + sequence parallelism with DTensor ``parallelize_module`` (as torchtitan does it).

Attention heads (query and grouped key/value heads) and the MLP's inner width are split over
the TP ranks (Megatron-LM column/row parallel linears). Between blocks the residual stream is
sharded along the sequence (sequence parallelism): norms run on a sequence shard, the block
inputs are all-gathered before the column-parallel linears and the row-parallel outputs are
reduce-scattered back to sequence shards. The embedding is vocabulary-parallel; the head
all-gathers the full logits, so the loss is computed as on one device.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from profiler.trainer.model import Transformer
from profiler.trainer.moe import MoE
from profiler.trainer.moe_parallel import MoETensorParallel


def apply_tensor_parallel(model: Transformer, tp_mesh: DeviceMesh) -> Transformer:
    """Shard ``model`` (a whole model or a pipeline stage) over ``tp_mesh`` in place."""
    if tp_mesh.size() == 1:
        return model
    for block in model.blocks():
        parallelize_module(block, tp_mesh, _block_plan(block.mlp))
    plan: dict[str, ParallelStyle] = {}
    if model.embed is not None:
        plan["embed.tok"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
        if model.embed.pos is not None:
            plan["embed.pos"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if model.norm is not None and model.output is not None:
        plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    parallelize_module(model, tp_mesh, plan)
    if model.tied_embeddings and model.embed is not None and model.output is not None:
        model.output.weight = model.embed.tok.weight  # re-tie: both are Shard(0) over the vocab
    return model


def _block_plan(mlp: nn.Module) -> dict[str, ParallelStyle]:
    """Per-block plan: sequence-parallel norms, column/row-parallel attention, and the
    feed-forward part's (:func:`_mlp_plan`)."""
    gather_input = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "attention_norm": SequenceParallel(),
        "attention": gather_input,
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        **_mlp_plan(mlp),
    }


def _mlp_plan(mlp: nn.Module) -> dict[str, ParallelStyle]:
    """A block's feed-forward part: an MLP column/row-parallel (w3 beside w1 when SwiGLU); an MoE
    block computes on the sequence shard instead (:class:`MoETensorParallel`)."""
    if isinstance(mlp, MoE):
        return {"mlp": MoETensorParallel()}
    plan: dict[str, ParallelStyle] = {
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    if getattr(mlp, "w3", None) is not None:
        plan["mlp.w3"] = ColwiseParallel()
    return plan
