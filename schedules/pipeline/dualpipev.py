"""DualPipeV (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv 2412.19437, and the
DualPipe repository's V-shaped variant) in the order of
``torch.distributed.pipelining.ScheduleDualPipeV``.

Each rank ``r`` of ``p`` holds two chunks on the V stage map: stage ``r`` (chunk 0) and stage
``2p-1-r`` (chunk 1). Needs ``m >= 2p`` micro-batches. Phases of rank ``r``:

1. ``2(p-r-1)`` forwards of chunk 0;
2. ``r+1`` times: forward chunk 0, forward chunk 1;
3. ``p-r-1`` times: input-gradient ``B`` of chunk 1, its ``W`` (zero-bubble split), forward chunk 1;
4. main phase, ``m-2p+r+1`` times: forward chunk 0 with full backward chunk 1, then forward chunk 1
   with full backward chunk 0 (DualPipe overlaps each such pair so the MoE all-to-all of one hides
   under the compute of the other);
5. ``p-r-1`` times: full backward chunk 1, then forward chunk 1 with full backward chunk 0;
6. ``r+1`` times: backward chunk 1, backward chunk 0 — the second half of them split into
   ``B`` + deferred ``W`` (from the middle iteration on; on even ranks starting with chunk 0's);
7. ``p-r-1`` times: one deferred ``W``, then a split ``B`` of chunk 0;
8. the remaining deferred ``W`` passes.

Every rank holds ``2p + 1`` chunk activations at its peak (the DualPipe README's "PP+1" with
``PP = 2p`` stages).

Notation deviations from torch (documented, deliberate): an unsplit ("full") backward, torch's
``B``, is written here as ``B`` immediately followed by ``W`` of the same micro-batch, so the whole
schedule speaks B/W; torch's ``OVERLAP_F_B`` pair is written as its forward then its backward (the
overlap itself is for the engine to model).
"""

from __future__ import annotations

from core.errors import invalid
from schedules.actions import Action, PipelineSchedule
from schedules.pipeline._common import assemble, check_sizes, chunk_stage, require_vpp
from schedules.pipeline._writer import RankWriter


def build_dualpipev(pp: int, microbatches: int, vpp: int = 2) -> PipelineSchedule:
    """DualPipeV order (torch's ScheduleDualPipeV); two chunks per rank, ``microbatches >= 2*pp``."""
    check_sizes(pp, microbatches, vpp)
    require_vpp("dualpipev", vpp, (2,))
    if microbatches < 2 * pp:
        raise invalid("microbatches", microbatches,
                      f"dualpipev needs at least 2*pp = {2 * pp} micro-batches")
    orders = [_rank_order(rank, pp, microbatches) for rank in range(pp)]
    return assemble("dualpipev", pp, microbatches, vpp, orders, stage_map="v")


def _rank_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    down, up = chunk_stage(rank, 0, pp, "v"), chunk_stage(rank, 1, pp, "v")
    out = RankWriter(pp)
    _warm_up(out, rank, pp, down, up)
    for _ in range(microbatches - 2 * pp + rank + 1):
        out.forward(down)
        out.full_backward(up)
        out.forward(up)
        out.full_backward(down)
    for _ in range(pp - rank - 1):
        out.full_backward(up)
        out.forward(up)
        out.full_backward(down)
    _cool_down(out, rank, pp, down, up)
    return out.actions


def _warm_up(out: RankWriter, rank: int, pp: int, down: int, up: int) -> None:
    for _ in range(2 * (pp - rank - 1)):
        out.forward(down)
    for _ in range(rank + 1):
        out.forward(down)
        out.forward(up)
    for _ in range(pp - rank - 1):
        out.split_backward(up)
        out.pop_weight()
        out.forward(up)


def _cool_down(out: RankWriter, rank: int, pp: int, down: int, up: int) -> None:
    split = False
    middle = (rank + 1) // 2
    for i in range(rank + 1):
        split = split or (i == middle and rank % 2 == 1)
        _backward(out, up, split)
        split = split or (i == middle and rank % 2 == 0)
        _backward(out, down, split)
    for _ in range(pp - rank - 1):
        out.pop_weight()
        out.split_backward(down)
    for _ in range(rank + 1):
        out.pop_weight()


def _backward(out: RankWriter, stage: int, split: bool) -> None:
    if split:
        out.split_backward(stage)
    else:
        out.full_backward(stage)
