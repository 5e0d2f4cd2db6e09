"""The depth-first looped order shared by the interleaved schedules (loop stage map).

A rank holding ``v`` chunks (virtual stages ``chunk*p + rank``) walks its ``v*m`` forward
operations in groups of ``g`` micro-batches: forward operation ``k`` runs chunk ``(k // g) % v``;
backward operation ``j`` runs chunk ``v - 1 - (j // g) % v``; micro-batches are numbered per
chunk in issue order (Narayanan et al. 2021, sec. 2.2; Megatron-LM's ``get_model_chunk_id``).

The rank issues ``warmup`` forwards, then pairs one forward with one backward until the forwards
run out, then drains the backwards. With ``weight_lag`` set the backwards are split: each ``B``
computes the input gradient, and the weight gradient ``W`` of backward ``j - weight_lag`` runs right
after backward ``j``; the last ``weight_lag`` weight gradients close the rank's order.
"""

from __future__ import annotations

from schedules.actions import Action
from schedules.pipeline._common import act, chunk_stage


def order_looped_rank(*, rank: int, pp: int, microbatches: int, vpp: int, group: int,
                      warmup: int, weight_lag: int | None = None) -> list[Action]:
    """One rank's compute order; ``weight_lag=None`` keeps full backwards (no ``W``)."""
    total = vpp * microbatches
    forwards = _walk(rank, pp, vpp, group, total, backward=False)
    backwards = _walk(rank, pp, vpp, group, total, backward=True)
    order = [act(stage, "F", mb, pp) for stage, mb in forwards[:warmup]]
    for j, (stage, mb) in enumerate(backwards):
        if warmup + j < total:
            f_stage, f_mb = forwards[warmup + j]
            order.append(act(f_stage, "F", f_mb, pp))
        order.append(act(stage, "B", mb, pp))
        if weight_lag is not None and j >= weight_lag:
            w_stage, w_mb = backwards[j - weight_lag]
            order.append(act(w_stage, "W", w_mb, pp))
    if weight_lag is not None:
        order += [act(stage, "W", mb, pp) for stage, mb in backwards[max(0, total - weight_lag):]]
    return order


def _walk(rank: int, pp: int, vpp: int, group: int, total: int, *,
          backward: bool) -> list[tuple[int, int]]:
    """(stage, micro-batch) of each forward (or backward) operation of ``rank`` in issue order."""
    issued = [0] * vpp
    walk = []
    for k in range(total):
        chunk = (k // group) % vpp
        if backward:
            chunk = vpp - 1 - chunk
        walk.append((chunk_stage(rank, chunk, pp), issued[chunk]))
        issued[chunk] += 1
    return walk
