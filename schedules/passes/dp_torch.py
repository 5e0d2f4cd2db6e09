"""The data-parallel pass as the included trainer runs it (framework="torch"): FSDP2 units under
``torch.distributed.pipelining``.

The trainer wraps each transformer block in its own unit and the stage module (embedding, final
norm, head) in a root unit, with ``fully_shard`` (ZeRO-2: parameters kept unsharded after
forward; ZeRO-3: resharded) or ``replicate`` (ZeRO-0, and ZeRO-1 with a sharded optimizer).
Seen in its traces (torch 2.13, gloo) and in ``pipelining/stage.py``:

- Gradient reduction is deferred to the stage's ``REDUCE_GRAD`` (``perform_reduce_grad``),
  right after its last backward: unit by unit (root first), a post-backward copy of the unit's
  gradients on the compute stream (``fsdp::chunk_cat`` and a copy: 4 passes over them), then
  its all-reduce (replicate) or reduce-scatter (FSDP), which the next unit waits for (FSDP2
  keeps one reduction in flight; on CPUs it is done before the next copy starts). Then (with several
  micro-batches, and also without DP) the gradients are divided by the number of
  micro-batches, unit by unit (``scale_grads``). That is the pipelining runtime (the trainer,
  a one-stage pipeline even without PP, whose plans say ``overlap_grad_reduce=False``; any
  pp > 1). Without PP and with ``overlap_grad_reduce`` (the FSDP presets: torchtitan runs a
  plain ``loss.backward()``), FSDP's own post-backward hooks reduce each block's gradients as
  soon as its backward ends, under the next block's backward, and the root's in the final
  callback, in every micro-batch's backward (:func:`schedules.passes.fsdp_reduce.reduces_in_hooks`); under PP too with
  ``plan.grad_sync="every-microbatch"`` (a stage module that is not itself an FSDP unit gets a
  regular backward from the pipelining stage).
- ZeRO-2/3 gather a unit's parameters right before the unit computes, when they are sharded
  (no prefetch in forward on CPUs; on accelerators and in backward the next block's gather is
  issued when a block starts, so it overlaps that block's compute (:func:`schedules.passes.fsdp_gather._prefetches`), except
  where collectives block their caller:
  gloo's all-gather without ``async_op``, as FSDP2's prefetch issues it, returns when done, so
  on CPU hosts the block starts after it; ``BuildOptions.gloo_host``), then copy them out of the gathered buffer on
  the compute stream (``foreach_all_gather_copy_out``: 2 passes over the unit's parameters). In
  backward the wait for the gather happens in the block's pre-backward hook, inside an autograd
  function: the trace shows it as compute, and so does the model (the copy-out spans the wait). A unit is sharded at the start of the step; after a forward ZeRO-3
  reshards it (every unit in the trainer; FSDP's default keeps the root, torchtitan the last
  block too: ``plan.fsdp_reshard_after_forward``, :func:`schedules.passes.fsdp_gather.reshards_after_forward`); after a
  backward that is not the last it stays unsharded; ``REDUCE_GRAD`` reshards it (and so does
  every backward whose hooks reduce). So ZeRO-2 gathers once per step (per micro-batch where the hooks reduce), ZeRO-3 before every backward and every forward
  that follows a forward; every step starts with every unit sharded.
- The optimizer (AdamW) steps unit by unit over the rank's parameters: all of them (ZeRO-0),
  the owned 1/N (ZeRO-1), or the 1/N shards (ZeRO-2/3), as ``plan.optimizer`` says (torch's
  AdamW: ``EAGER_ADAMW_PASSES`` over each fp32 parameter, :func:`schedules.stage_ops.adam_bytes_per_param`). ZeRO-1 then broadcasts each DP rank's
  updated parameters to the others (``profiler/trainer/zero1.py``, per DP rank: every rank
  flattens the owner's parameters into a new buffer, a blocking broadcast, a copy back).
- CPU offload (``plan.offload="optimizer"``, FSDP2's ``CPUOffloadPolicy``, ZeRO-2/3): the
  sharded parameters, gradients and optimizer states live in host memory. Before each
  all-gather the unit's parameter shard is copied host -> device (``param h2d``), after each
  reduce-scatter its gradient shard device -> host (``grad d2h``), both "offload" tasks in the
  ``memcpy`` lane priced as PCIe transfers on GPUs and as host memory copies at the DRAM
  bandwidth on a CPU host (``pcie_to_device``/``pcie_to_host``, see :mod:`sim.host_pricing`);
  the optimizer steps on the host (``cpu_adam``, ``host`` lane) after the last gradient copy,
  and nothing is copied back: the next all-gather fetches the updated shard. On a CPU device
  torch does not copy at all (``Tensor.to("cpu")`` returns the host tensor) and the "host"
  optimizer is the same cores' optimizer: the simulator prices those copies at zero and the
  host optimizer as the device's (:meth:`sim.pricing.TaskCoster._on_host_device`).
- Routed experts (MoE with expert parallelism) are their own unit over the expert-data-parallel
  group (the trainer's ``fully_shard``/``replicate`` over edp): their gradients are reduced after
  the stage's other units (:mod:`schedules.passes.ep_dp`) and the optimizer steps them last. The
  trainer's EDP group is dp / ep ranks (EP ranks are DP ranks): with one rank nothing is reduced
  over it and nothing sharded. Under TP the MoE parameters' partial gradients are all-reduced
  over TP one parameter at a time around the layer's unit (:func:`schedules.passes.fsdp_reduce._moe_tp_sums`).
"""

from __future__ import annotations

from core.errors import invalid
from schedules.passes.fsdp_gather import gather_before_block, reshard_after_forward
from schedules.passes.fsdp_optimizer import optimizer_step
from schedules.passes.fsdp_reduce import (
    reduce_after_action,
    reduce_block_in_hooks,
    reduces_in_hooks,
)
from schedules.passes.fsdp_state import FsdpStep
from schedules.passes.program import ActionSlot, BuildContext, Coords, Record


def dp_torch_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The FSDP2/replicate tasks of rank ``c``'s ``step`` and its optimizer step."""
    if ctx.plan.grad_sync == "every-microbatch" and ctx.split:
        raise invalid("grad_sync", ctx.plan.grad_sync, "FSDP's hooks with a split backward (B then W) are not "
                      f"modelled: use a schedule without split backward, not {ctx.plan.schedule}")
    s = FsdpStep(ctx, c, step)
    for slot in slots:
        hooks = reduces_in_hooks(s, slot)
        reductions_from = len(s.pending)
        for b, layers in enumerate(slot.blocks):
            gather_before_block(s, slot, b, layers)
            reshard_after_forward(s, slot, layers)
            if hooks:
                reduce_block_in_hooks(s, slot, b, layers)
        reduce_after_action(s, slot, hooks, reductions_from)
    optimizer_step(s)
    return s.out
