"""Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", sec. 2.2): each rank holds ``v >= 2`` model chunks on the loop stage
map (virtual stage = chunk*p + rank) and runs the depth-first looped order of
:mod:`schedules.pipeline.looped` with full backwards.

Two variants:

- ``"interleaved"`` — the order of ``torch.distributed.pipelining.ScheduleInterleaved1F1B``. Micro-
  batches go in rounds of ``g = m // max(1, m // p)`` (``g = p`` when ``m % p == 0``, as in
  Megatron-LM); ``m`` need only be a multiple of ``max(1, m // p)`` (torch's relaxation of the
  paper's ``m % p == 0``; e.g. p=4 runs m=3, 6 or 10 but not m=9). Rank ``r`` warms up with
  ``min((v-1)*g + 2*(p-1-r), v*m)`` forwards. This equals Megatron-core's current schedule with
  ``microbatch_group_size_per_vp_stage = g``.
- ``"interleaved-megatron"`` — the order of the paper's Megatron-LM implementation: needs
  ``m % p == 0``, ``g = p``, and when ``m == p`` every rank runs all ``v*m`` forwards before any
  backward (Megatron-LM's ``all_warmup_microbatches``); otherwise identical to torch's.

In-flight activations: rank ``r`` peaks at ``min(warmup_r + 1, v*m)`` chunk activations, i.e. the
first rank holds ``v*p + p - 1`` chunks = ``p * (1 + (p-1)/(p*v))`` stage-equivalents (m > p).
"""

from __future__ import annotations

from core.errors import invalid
from core.vocab import Runtime
from schedules.actions import PipelineSchedule
from schedules.pipeline._common import assemble, check_sizes, interleave_group
from schedules.pipeline.looped import order_looped_rank

VARIANTS = (Runtime.TORCH, Runtime.MEGATRON)


def build_interleaved(pp: int, microbatches: int, vpp: int = 2, *,
                      variant: str = "torch") -> PipelineSchedule:
    """Interleaved 1F1B order; ``variant`` is "torch" (default) or "megatron" (see module doc)."""
    check_sizes(pp, microbatches, vpp)
    if variant not in VARIANTS:
        raise invalid("variant", variant, "expected one of " + ", ".join(VARIANTS))
    name = "interleaved" if variant == "torch" else "interleaved-megatron"
    if vpp < 2:
        raise invalid("vpp", vpp, f"the {name} schedule needs vpp >= 2 chunks per rank")
    group = _megatron_group(pp, microbatches) if variant == Runtime.MEGATRON else \
        interleave_group(pp, microbatches, name)
    orders = []
    for rank in range(pp):
        warmup = min((vpp - 1) * group + 2 * (pp - 1 - rank), vpp * microbatches)
        if variant == Runtime.MEGATRON and microbatches == pp:
            warmup = vpp * microbatches
        orders.append(order_looped_rank(rank=rank, pp=pp, microbatches=microbatches, vpp=vpp,
                                        group=group, warmup=warmup))
    return assemble(name, pp, microbatches, vpp, orders)


def _megatron_group(pp: int, microbatches: int) -> int:
    if microbatches % pp:
        raise invalid("microbatches", microbatches,
                      f"interleaved-megatron needs a multiple of pp={pp}")
    return pp
