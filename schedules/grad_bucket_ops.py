"""What the Megatron-runtime stacks do to a gradient bucket right before reducing it over the
data-parallel group, each a fact of the code:

- **Scale by 1/DP** in a separate pass over the bucket (read and write), before the collective:
  Megatron-LM 2021 ``megatron/model/distributed.py`` ``allreduce_gradients`` (``buffer_.data /=
  mpu.get_data_parallel_world_size()``, @fda81a212b); Megatron-Core r0.8.0
  ``distributed/param_and_grad_buffer.py`` ``Bucket.start_grad_sync`` (``self.grad_data *=
  self.gradient_scaling_factor``, 1/DP unless ``--ddp-average-in-collective``, off by default);
  DeepSpeed v0.6.2 ``engine.py`` ``allreduce_bucket`` (``tensor_to_allreduce.mul_(1. /
  world_size)``, the pipeline engine's ReduceGrads and BLOOM's BF16 path), ``stage_1_and_2.py``
  ``average_tensor`` (``tensor.div_``) and ``stage3.py`` (``div_`` before the reduce-scatter).
  Not with ``average_in_collective`` (``plan.average_in_collective``: NeMo's recipes set
  ``DistributedDataParallelConfig(average_in_collective=True)``, nemo/collections/llm/recipes/
  llama3_8b.py and 27 others; the collective averages).
- **NaN check** (``plan.grad_nan_check``: Megatron-Core r0.8.0 with
  ``--check-for-nan-in-loss-and-grad``, default on; NeMo's recipes ``check_for_nan_in_grad=True``):
  ``norm = self.grad_data.norm(p=2); assert not norm.isnan()`` in the same ``start_grad_sync``: a
  read of the bucket, then a host synchronisation.

Where they run: Megatron's DDP buckets and DeepSpeed's pipeline engine (ZeRO <= 1) issue them
from the backward hooks / after the schedule on the compute stream, where they are modelled
(:mod:`schedules.passes.compute`). DeepSpeed v0.6.2's ZeRO-3 (``zero3_unit="module"``) divides on
its reduction stream, in every micro-batch: ``reduce_scatter_coalesced``
(deepspeed/runtime/comm/coalesced_collectives.py @v0.6.2 l.97, ``tensor_partition_flat_buffer.div_
(world_sz)``, called from stage3.py ``__avg_scatter_grads`` l.1548-1573) pre-divides the whole
(unsharded) gradients before the reduce-scatter: :func:`zero3_predivide`, the first op of the
reduce-scatter task. Not modelled: ZeRO-2's ``average_tensor`` division and the 2021 (v0.5)
ZeRO-3 path's. Units: bytes.
"""

from __future__ import annotations

from core.taskgraph import Op, host_sync_op
from core.vocab import Kind, Lane, OpClass, Runtime
from schedules.plan import ParallelPlan


def scales_before_reduction(plan: ParallelPlan) -> bool:
    """Does the stack scale a bucket in its own pass before reducing it (module docstring)?
    The Megatron runtime's stacks (Megatron-LM, Megatron-Core, DeepSpeed); the torch runtime's
    FSDP divides inside its reduce-scatter (``ReduceOp.AVG`` / pre-multiplied sum)."""
    return plan.framework == Runtime.MEGATRON


def bucket_ops(plan: ParallelPlan, params: float) -> tuple[Op, ...]:
    """The NaN check (Megatron-Core) and the 1/DP scaling of a bucket of ``params`` gradients,
    in the reduction's dtype (``plan.grad_reduce_bytes``), on the compute stream."""
    lane = Lane.COMPUTE
    if not scales_before_reduction(plan) or params <= 0:
        return ()
    size = plan.grad_reduce_bytes * params
    check: tuple[Op, ...] = ()
    if plan.grad_nan_check:
        check = (Op(lane, Kind.BWD, "grad.nan_norm", OpClass.ELEMENTWISE, bytes=size),
                 host_sync_op(Kind.BWD, "grad.isnan"))
    scale = () if plan.average_in_collective else (Op(lane, Kind.BWD, "grad.scale", OpClass.ELEMENTWISE, bytes=2 * size),)
    return (*check, *scale)


def zero3_predivide(plan: ParallelPlan, name: str, params: float) -> tuple[Op, ...]:
    """DeepSpeed v0.6.2 ZeRO-3's ``div_`` of ``params`` gradients before their reduce-scatter
    (module docstring): read and write once in the reduction's dtype, on the DP stream. Kind
    "other": in place, not a message buffer. Nothing for other stacks (ZeRO < 3, FSDP's units,
    the 2021 path) or with ``average_in_collective``."""
    if plan.zero != 3 or plan.zero3_unit != "module" or plan.per_param_zero3 or plan.average_in_collective:
        return ()
    return (Op(Lane.DP, Kind.OTHER, f"{name}.div", OpClass.ELEMENTWISE, bytes=2 * plan.grad_reduce_bytes * params),)
