"""What Megatron-LM does once per micro-batch outside the model: report the loss and time the
passes. Each a fact of the code, each a plan field a framework preset sets:

- ``loss_allreduce``: the last pipeline stage's loss function all-reduces the micro-batch's
  reported loss over the data-parallel group, a synchronous ``torch.distributed.all_reduce`` that
  the compute stream waits for (Megatron-LM 2021 ``pretrain_gpt.py`` ``loss_func``:
  ``average_losses_across_data_parallel_group([loss])``, @fda81a212b; Megatron-Core r0.8.0
  ``pretrain_gpt.py`` l.144-145: ``reporting_loss = loss.clone().detach();
  torch.distributed.all_reduce(reporting_loss, group=mpu.get_data_parallel_group())``, the loss
  sum and the token count: :data:`LOSS_REPORT_BYTES`, 2021's single fp32 priced alike, the
  collective being latency-bound; over the DP x CP group, Megatron's DP group without CP). NeMo's ``MaskedTokenLossReduction`` reduces once per step
  (``reduce``), not per micro-batch.
- ``loss_nan_check``: Megatron-Core r0.8.0 ``--check-for-nan-in-loss-and-grad`` (on by default:
  ``--no-check-for-nan-in-loss-and-grad`` is ``store_false``) runs ``assert not
  loss[0].isnan()`` in ``loss_func`` (l.136-141), a Python bool of a CUDA tensor: the host waits
  for the GPU, before the all-reduce.
- ``timer_syncs``: Megatron-LM's timers synchronize the device at every start and stop
  (``megatron/global_vars.py`` ``_Timer.start``/``stop``: ``torch.cuda.synchronize()``,
  @fda81a212b) and ``megatron/schedules.py`` times ``forward-compute`` and ``backward-compute``
  around every micro-batch's pass (and ``pretrain_gpt.py`` ``batch-generator`` around
  ``get_batch``), until "Timing levels" (77efcccb93, 2022-08-10) made level 0, no synchronize, the
  default. Modelled as one synchronize at the start of each forward and backward pass: the stop
  of the pass before and the start of this one meet with no GPU work between them.

A synchronize is an op of class ``host_sync``: the GPU then waits for the host to issue the next
kernels, the launch-bound interval of :mod:`sim.host_sync`.
"""

from __future__ import annotations

from core.groups import DP
from core.taskgraph import Op, collective_op, host_sync_op
from core.vocab import Collective, Kind, Lane
from schedules.plan import ParallelPlan

LOSS_REPORT_BYTES = 8
"""Megatron-Core r0.8.0's reported loss: the loss sum and the token count, two fp32."""


def loss_report_ops(plan: ParallelPlan, kind: Kind) -> tuple[Op, ...]:
    """The last stage's loss reporting of one micro-batch, after the loss: the NaN check's host
    sync, then the all-reduce over the DP group (module docstring)."""
    check = (host_sync_op(kind, "loss.isnan"),) if plan.loss_nan_check else ()
    reduce = (collective_op(Lane.DP, Collective.ALL_REDUCE, "loss.dp_allreduce", bytes=LOSS_REPORT_BYTES, dim=DP),) \
        if plan.loss_allreduce and plan.dp > 1 else ()
    return check + reduce


def timer_sync_ops(plan: ParallelPlan, kind: Kind, layer: int) -> tuple[Op, ...]:
    """The timers' synchronize at the start of a pass whose first layer is ``layer``."""
    return (host_sync_op(kind, f"L{layer}.timer_sync", layer=layer),) if plan.timer_syncs else ()
