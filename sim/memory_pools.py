"""Reserved HBM: the caching allocator's per-stream pools, each at its own peak.

Fact (PyTorch, ``c10/cuda/CUDACachingAllocator.cpp``, the allocator's header comment):
"Allocations are associated with a stream. Once freed, blocks can be re-allocated on the same
stream, but not on any other stream." Memory a side stream has cached is not handed to the compute
stream (nor the reverse) until ``empty_cache``, so what the allocator reserves
(``torch.cuda.max_memory_reserved``, what torchtitan logs as its peak memory) is at least the sum
over streams of each stream's own peak, not the peak of the sum that the memory timeline gives
(:mod:`sim.memory_timeline`, the allocated bytes).

Which stream allocates what, for the torch runtime's ZeRO-3 (FSDP2,
``torch/distributed/_composable/fsdp/_fsdp_collectives.py`` as torchtitan ran it in 2024):

- the all-gather output (a unit's gathered flat parameters) under ``all_gather_copy_in_stream``,
  copied out into the parameters on the compute stream when the unit runs: the all-gather pool
  holds the DP all-gathers' messages while they are in flight;
- the reduce-scatter input (the unit's unsharded gradients in the reduce dtype) and output (the
  sharded gradients, kept to ``zero_grad``) under ``reduce_scatter_stream``: that pool holds the
  DP reduce-scatters' messages in flight plus the sharded gradients (later torch releases allocate
  the input on the compute stream; the output stays on the reduce-scatter stream);
- everything else on the compute stream.

Left out: fragmentation inside a pool (torchtitan runs with ``expandable_segments:True``), the CUDA
context and NCCL's own buffers (outside the allocator). Other runtimes (Megatron's and DeepSpeed's
contiguous buffers, DDP's in-place buckets) are given their allocated peak: their side-stream
allocations are not modelled.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from core.vocab import Kind, Lane, Runtime
from schedules.plan import ParallelPlan
from sim.memory_timeline import MemoryTimeline, step_function
from sim.span_arrays import label_mask

if TYPE_CHECKING:  # FSDP2's side-stream pools read the frame (importing pandas); other runs do not
    import pandas as pd

    from sim.simulate import SimulationResult


class Pool(str, Enum):
    """The caching allocator's pools an FSDP2 rank fills (one per stream)."""

    COMPUTE = "compute"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"


def has_side_stream_pools(plan: ParallelPlan) -> bool:
    """The plan's runtime allocates on side streams that this module models (FSDP2)."""
    return plan.framework == Runtime.TORCH and plan.zero == 3


def pool_peaks(plan: ParallelPlan, timeline: MemoryTimeline, rank_spans: pd.DataFrame) -> dict[Pool, float]:
    """Each pool's highest bytes over the rank's step (``rank_spans``: the rank's Timeline spans);
    without side-stream pools, everything is the compute pool at the allocated peak."""
    if not has_side_stream_pools(plan):
        return {Pool.COMPUTE: timeline.peak_bytes, Pool.ALL_GATHER: 0.0, Pool.REDUCE_SCATTER: 0.0}
    dp = label_mask(rank_spans["lane"], lambda lane: lane == Lane.DP)
    kinds = rank_spans["kind"]
    gathers = rank_spans[dp & label_mask(kinds, lambda k: k == Kind.ALL_GATHER)]
    scatters = rank_spans[dp & label_mask(kinds, lambda k: k == Kind.REDUCE_SCATTER)]
    edges = [timeline.times_s] + [s[c].to_numpy(float) for s in (gathers, scatters) for c in ("start_s", "end_s")]
    grid = np.unique(np.concatenate(edges))
    at = np.clip(np.searchsorted(timeline.times_s, grid, side="right") - 1, 0, None)
    total, grads = timeline.total[at], timeline.bytes["grads"][at]
    in_gather, in_scatter = _in_flight(gathers, grid), _in_flight(scatters, grid)
    return {Pool.COMPUTE: float(np.max(total - in_gather - in_scatter - grads)),
            Pool.ALL_GATHER: float(np.max(in_gather)),
            Pool.REDUCE_SCATTER: float(np.max(in_scatter + grads))}


def reserved_peak_bytes(plan: ParallelPlan, timeline: MemoryTimeline, rank_spans: pd.DataFrame) -> float:
    """The allocator's reserved bytes at their peak: the pools' peaks summed (see module doc)."""
    return sum(pool_peaks(plan, timeline, rank_spans).values())


def _in_flight(spans: pd.DataFrame, grid: np.ndarray) -> np.ndarray:
    """Bytes of ``spans`` in flight just after each time of ``grid`` (each from start to end)."""
    size = spans["bytes"].to_numpy(float)
    t = np.concatenate([spans["start_s"].to_numpy(float), spans["end_s"].to_numpy(float)])
    return step_function(t, np.concatenate([size, -size]), grid)


def reserved_peak(result: SimulationResult) -> float:
    """The highest reserved bytes (:func:`reserved_peak_bytes`) of any simulated rank; the static
    breakdown's total when the simulation kept no memory timeline."""
    if not result.memory_peaks:
        return result.memory[result.peak_rank].total
    if not has_side_stream_pools(result.job.plan):  # one pool: the allocated peak
        return max(p.bytes for p in result.memory_peaks.values())
    spans = result.timeline.spans
    ranks = spans["rank"].to_numpy()
    return max(reserved_peak_bytes(result.job.plan, mt, spans[ranks == rank])
               for rank, mt in result.memory_timelines.items())
