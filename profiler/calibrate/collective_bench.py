"""Collective microbenchmarks: every collective the trainer uses, over sizes and group sizes.

For each group size ``n`` this starts ``n`` processes (torch.multiprocessing, spawn) that join a
process group (gloo on CPUs, NCCL on GPUs: one GPU per process) and time, for each operation
and size, ``reps`` calls after a barrier; a sample is the slowest rank's median seconds per
call. Sizes are nccl-tests sizes: the whole buffer (the all-gather output, the reduce-scatter
input), the message for broadcast and p2p (p2p: half a ping-pong between ranks 0 and 1).
Rank 0 reports progress and the samples through a queue.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from core.vocab import COLLECTIVES, Collective, OpClass

Sample = dict[str, Any]
OPS = (*(c for c in COLLECTIVES if c != Collective.ALL_TO_ALL), OpClass.P2P)  # no all-to-all benchmark
# Up to 16 MiB: the trainer's messages (a layer of the suite's wider model is ~12 MB in fp32) must
# lie inside the fitted range, not be extrapolated from cache-resident sizes.
SIZES = (4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
GROUP_SIZES = (2, 4, 8)
ELEMENT_BYTES = 4
INNER = 8  # back-to-back calls per timed batch


def free_port() -> int:
    """A free TCP port on this host for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _op(name: str, size: int, n: int, rank: int, device: Any) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    numel = max(n, size // ELEMENT_BYTES // n * n)
    if name == Collective.ALL_REDUCE:
        t = torch.ones(numel, device=device)
        return lambda: dist.all_reduce(t)
    if name == Collective.ALL_GATHER:
        out, inp = torch.empty(numel, device=device), torch.ones(numel // n, device=device)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if name == Collective.REDUCE_SCATTER:
        inp, out = torch.ones(numel, device=device), torch.empty(numel // n, device=device)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if name == Collective.BROADCAST:
        t = torch.ones(numel, device=device)
        return lambda: dist.broadcast(t, src=0)
    t = torch.ones(numel, device=device)

    def ping_pong() -> None:
        if rank == 0:
            dist.send(t, 1)
            dist.recv(t, 1)
        elif rank == 1:
            dist.recv(t, 0)
            dist.send(t, 0)
    return ping_pong


def _time_op(fn: Callable[[], None], reps: int, device: Any, inner: int = INNER) -> float:
    """Median over ``reps`` of the mean time of ``inner`` back-to-back calls after a barrier
    (the calls synchronise the ranks, so the barrier's exit skew is amortised)."""
    import torch
    import torch.distributed as dist

    fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        if device.type != "cpu":
            torch.accelerator.synchronize(device)
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if device.type != "cpu":
            torch.accelerator.synchronize(device)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def _worker(rank: int, n: int, port: int, cases: list[tuple[str, int]], reps: int, queue: Any) -> None:
    """One rank: time every case; rank 0 puts ("progress", i) and finally ("samples", [...])."""
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # *_into_tensor names (torch 2.13)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=n,
                            device_id=device if cuda else None)
    samples = []
    for i, (name, size) in enumerate(cases):
        seconds = _time_op(_op(name, size, n, rank, device), reps, device)
        if name == "p2p":
            seconds /= 2
        worst = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if rank == 0:
            samples.append({"bench": "collective", "op": name, "ranks": n, "bytes": size,
                            "seconds": float(worst.item()), "backend": dist.get_backend()})
            queue.put(("progress", i + 1))
    if rank == 0:
        queue.put(("samples", samples))
    dist.destroy_process_group()


def collective_cases(n: int, ops: tuple[str, ...] = OPS, sizes: tuple[int, ...] = SIZES) -> list[tuple[str, int]]:
    """(op, size) cases for a group of ``n`` (p2p only for the pair)."""
    return [(op, size) for op in ops for size in sizes if op != "p2p" or n == 2]


def run_group(n: int, cases: list[tuple[str, int]], reps: int,
              on_progress: Callable[[int], None] | None = None, timeout_s: float = 900.0) -> list[Sample]:
    """Time ``cases`` on a fresh group of ``n`` processes; returns rank 0's samples."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, n, port, cases, reps, queue), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    samples: list[Sample] | None = None
    deadline = time.monotonic() + timeout_s
    while samples is None:
        kind, value = queue.get(timeout=max(1.0, deadline - time.monotonic()))
        if kind == "progress" and on_progress is not None:
            on_progress(value)
        elif kind == "samples":
            samples = value
    for p in procs:
        p.join(timeout=60)
    failed = [p.exitcode for p in procs if p.exitcode not in (0, None)]
    if failed:
        raise RuntimeError(f"collective benchmark on {n} ranks: a rank exited with {failed[0]}")
    return samples
