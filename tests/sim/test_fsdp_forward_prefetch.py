"""FSDP's implicit forward prefetching (framework="torch", ZeRO-3): on an accelerator the next
block's all-gather runs under the current block's forward (PyTorch notes/fsdp.rst, "FSDP Prefetch
Nuances": implicit forward prefetching is always enabled, "the 1st all-gather will not be able to
overlap with anything"); on a CPU host, where the host is the device, each gather starts when its
block is reached (the trainer's gloo traces)."""

from __future__ import annotations

import numpy as np

from sim.job import resolve_job
from sim.simulate import simulate


def _forward(cluster: str, dp: int, model: str, mbs: int) -> tuple[float, float, float]:
    """Rank 0's forward: the compute lane's idle time, the first two gathers' time (the root's and
    the first block's: nothing runs before them) and all the other gathers' time, seconds."""
    job = resolve_job(dict(model=model, cluster=cluster, nodes=1, tp=1, pp=1, dp=dp, zero=3,
                           framework="torch", microbatch_size=mbs, global_batch=dp * mbs))
    spans = simulate(job).timeline.spans
    rank0 = spans[spans["rank"] == 0]
    first_bwd = rank0[(rank0["lane"] == "compute") & (rank0["kind"] == "bwd")]["start_s"].min()
    compute = rank0[(rank0["lane"] == "compute") & (rank0["end_s"] <= first_bwd)].sort_values("start_s")
    starts, ends = compute["start_s"].to_numpy(), compute["end_s"].to_numpy()
    idle = float(np.clip(starts[1:] - np.maximum.accumulate(ends)[:-1], 0.0, None).sum())
    gathers = rank0[(rank0["lane"] == "comm.dp") & (rank0["kind"] == "all_gather") & (rank0["end_s"] <= first_bwd)]
    lengths = (gathers.sort_values("start_s")["end_s"] - gathers.sort_values("start_s")["start_s"]).to_numpy()
    return idle, float(lengths[:2].sum()), float(lengths[2:].sum())


def test_gpu_forward_waits_only_for_the_first_gathers() -> None:
    idle, first, rest = _forward("dgx-a100", 8, "gpt3-1.7b", 4)  # a block's gather << its forward
    assert rest > first > 0
    assert idle <= first * 1.001  # the other 23 gathers run under the previous block's forward


def test_cpu_host_forward_waits_for_every_gather() -> None:
    idle, first, rest = _forward("cpu-host", 2, "tiny", 1)
    assert idle >= rest > 0  # every later gather is waited for, none hidden
