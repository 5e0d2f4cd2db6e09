"""Reserved memory as the caching allocator's per-stream pools, each at its own peak (sim.memory_pools):
closed forms on hand-built timelines, the FSDP2 stream assignment read from torch's own source, and
the pools of a simulated FSDP2 step partitioning its allocated bytes."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from sim.job import resolve_job
from sim.memory_pools import Pool, pool_peaks, reserved_peak, reserved_peak_bytes
from sim.memory_timeline import CATEGORIES, MemoryTimeline
from sim.simulate import simulate

GB = 1e9


def _timeline(times: list[float], **categories: list[float]) -> MemoryTimeline:
    zeros = [0.0] * len(times)
    return MemoryTimeline(0, np.array(times), {c: np.array(categories.get(c, zeros), float) for c in CATEGORIES})


def _spans(*rows: tuple[str, str, float, float, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["lane", "kind", "start_s", "end_s", "bytes"])


def test_pools_peak_at_different_times_so_reserved_exceeds_the_allocated_peak() -> None:
    # t=0..1: a 2 GB unit all-gather in flight (held as a comm buffer); t=1..2: activations grow to
    # 10 GB (the compute pool's peak); t=2..3: 4 GB of sharded gradients plus a 3 GB reduce-scatter
    # input, activations freed to 1 GB. Allocated peak 10 + 0 = 10 GB at t=1 (the gather copied out
    # and freed); per pool: compute 10, all-gather 2, reduce-scatter 4 + 3 = 7.
    tl = _timeline([0.0, 1.0, 2.0, 3.0],
                   comm_buffers=[2 * GB, 0.0, 3 * GB, 0.0],
                   activations=[0.0, 10 * GB, 1 * GB, 0.0],
                   grads=[0.0, 0.0, 4 * GB, 0.0])
    spans = _spans(("comm.dp", "all_gather", 0.0, 1.0, 2 * GB), ("comm.dp", "reduce_scatter", 2.0, 3.0, 3 * GB),
                   ("compute", "fwd", 0.0, 2.0, 0.0))
    plan = resolve_job({"framework": "torch", "zero": 3, "dp": 8, "tp": 1, "pp": 1}).plan
    peaks = pool_peaks(plan, tl, spans)
    assert peaks == {Pool.COMPUTE: pytest.approx(10 * GB), Pool.ALL_GATHER: pytest.approx(2 * GB),
                     Pool.REDUCE_SCATTER: pytest.approx(7 * GB)}
    assert reserved_peak_bytes(plan, tl, spans) == pytest.approx(19 * GB)
    assert tl.peak_bytes == pytest.approx(10 * GB)


def test_concurrent_gathers_add_up_in_their_pool() -> None:
    tl = _timeline([0.0, 1.0, 2.0, 3.0], comm_buffers=[1 * GB, 3 * GB, 2 * GB, 0.0])
    spans = _spans(("comm.dp", "all_gather", 0.0, 2.0, 1 * GB), ("comm.dp", "all_gather", 1.0, 3.0, 2 * GB))
    plan = resolve_job({"framework": "torch", "zero": 3, "dp": 8, "tp": 1, "pp": 1}).plan
    peaks = pool_peaks(plan, tl, spans)
    assert peaks[Pool.ALL_GATHER] == pytest.approx(3 * GB) and peaks[Pool.COMPUTE] == pytest.approx(0.0)


@pytest.mark.parametrize("settings", [{"framework": "megatron", "zero": 1}, {"framework": "torch", "zero": 1},
                                      {"framework": "megatron", "zero": 3}])
def test_runtimes_without_modelled_side_streams_reserve_their_allocated_peak(settings: dict) -> None:
    tl = _timeline([0.0, 1.0], comm_buffers=[2 * GB, 0.0], activations=[1 * GB, 5 * GB])
    spans = _spans(("comm.dp", "all_gather", 0.0, 1.0, 2 * GB))
    plan = resolve_job({**settings, "dp": 8, "tp": 1, "pp": 1}).plan
    assert reserved_peak_bytes(plan, tl, spans) == pytest.approx(tl.peak_bytes) == pytest.approx(5 * GB)


def test_fsdp2_allocates_gathers_and_reduced_gradients_on_its_side_streams() -> None:
    """The fact the pools rest on, read from the installed torch's FSDP2: the all-gather output is
    allocated under the copy-in stream, the reduce-scatter output under the reduce-scatter stream."""
    collectives = pytest.importorskip("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    gather = inspect.getsource(collectives.foreach_all_gather)
    assert gather.index("stream(all_gather_copy_in_stream)") < gather.index("all_gather_output = ")
    reduce = inspect.getsource(collectives.foreach_reduce)
    assert reduce.index("stream(reduce_scatter_stream)") < reduce.index("reduce_output = ")


def test_simulated_fsdp2_step_pools_partition_the_allocated_bytes() -> None:
    job = resolve_job({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1, "dp": 8, "tp": 1, "pp": 1,
                       "zero": 3, "framework": "torch", "global_batch": 8, "layers": 4})
    result = simulate(job)
    rank, mt = next(iter(result.memory_timelines.items()))
    spans = result.timeline.spans[result.timeline.spans["rank"] == rank]
    peaks = pool_peaks(job.plan, mt, spans)
    dp = spans[spans["lane"] == "comm.dp"]
    gathers, scatters = dp[dp["kind"] == "all_gather"], dp[dp["kind"] == "reduce_scatter"]
    assert len(gathers) and len(scatters)
    # the gather pool holds at least the largest unit's gathered parameters, at most all of them
    assert gathers["bytes"].max() <= peaks[Pool.ALL_GATHER] <= gathers["bytes"].sum()
    # the reduce-scatter pool: every sharded gradient plus at least the largest unit's input
    grads = float(mt.bytes["grads"].max())
    assert grads + scatters["bytes"].max() <= peaks[Pool.REDUCE_SCATTER] + 1.0
    assert peaks[Pool.COMPUTE] > 0
    reserved = reserved_peak(result)
    assert mt.peak_bytes < reserved <= mt.peak_bytes + peaks[Pool.ALL_GATHER] + peaks[Pool.REDUCE_SCATTER]
