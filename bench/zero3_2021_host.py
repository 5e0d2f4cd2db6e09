"""Benchmark: host seconds per call, and per rank, of DeepSpeed 2021's ZeRO-3 collectives.

DeepSpeed v0.3.13-v0.5.x gathers each weight with its own list-API all_gather and reduce-scatters
each gradient with its own list-API reduce_scatter, both built by a Python loop over the ranks
(deepspeed/runtime/zero/partition_parameters.py @v0.5.0):

- ``_allgather_param``: ``torch.zeros`` of the whole weight, ``torch.cuda.synchronize()``, then
  ``for i in range(world_size): partitions.append(flat.narrow(0, size * i, size))`` with
  ``if i == torch.distributed.get_rank(group=...)`` in every iteration, one ``copy_`` of the
  rank's own shard, then ``torch.distributed.all_gather(partitions, ...)``;
- ``_reduce_scatter_gradient``: ``for i in range(world_size)``: the slice bounds and
  ``param.grad.view(-1).narrow(0, start, size)`` (a zero-padded tensor for the last shard past
  the end), then ``torch.distributed.reduce_scatter(input_list[rank], input_list, ...)``.

PyTorch's list API then copies every rank's chunk with its own kernel, issued from C++
(``ProcessGroupNCCL::allgather``: "Copy the flattened output tensors to the outputs";
``reduce_scatter`` copies each input into the flat buffer first).

This script times, on this machine's CPU with the installed torch (gloo, one process):

1. the all-gather loop (everything of ``_allgather_param`` but the CUDA calls and the collective),
2. the reduce-scatter loop (``_reduce_scatter_gradient`` but the collective),
3. the C++ per-tensor cost of ``copy_`` (``torch._foreach_copy_`` over CPU tensors of one
   element: the dispatcher's part of each list-API copy, without the CUDA launch),

each at several world sizes, and fits seconds = a + b x world_size by least squares (least of
``--repeats`` timings per size). PyTorch's own list ``all_gather`` cannot be timed at these
world sizes here: gloo needs one process per rank (the list must hold world_size tensors) and
the machine has 2 cores; its C++ per-rank copies are item 3.

    python bench/zero3_2021_host.py               # prints the fits (microseconds)
    python bench/zero3_2021_host.py --repeats 50
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

SIZES = (64, 256, 1024, 2240)


def _debug_name(param: torch.Tensor) -> str:
    """What DeepSpeed's ``debug_param2name_id_shape_status`` formats (id, shape, status)."""
    return f"id: 7 shape: {tuple(param.shape)} status: NOT_AVAILABLE"


def gather_loop(world: int, group: object, shard: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """``_allgather_param`` @v0.5.0 without the CUDA calls and the collective."""
    size = shard.numel()
    message = f"---- Before allocating allgather param {_debug_name(weight)} partition size={size}"
    flat = torch.zeros(size * 1, dtype=weight.dtype).view(-1)  # one shard: dispatch, not the fill
    message += f"----allgather param with {_debug_name(weight)} partition size={size}"
    partitions = []
    for i in range(world):
        partitions.append(flat.narrow(0, 0, size))  # size * i on the GPU buffer; same view cost
        if i == dist.get_rank(group=group):
            partitions[i].data.copy_(shard, non_blocking=True)
    return partitions


def reduce_scatter_loop(world: int, group: object, grad: torch.Tensor) -> list[torch.Tensor]:
    """``_reduce_scatter_gradient`` @v0.5.0 without the collective (every shard inside the
    gradient: the bounds as DeepSpeed computes them, a view per rank)."""
    size = grad.numel() // world or 1
    numel = size * world
    inputs = []
    for i in range(world):
        start = i * size
        end = start + size
        if start < numel and end <= numel:
            piece = grad.view(-1).narrow(0, 0, size)
        else:
            piece = torch.zeros(size, dtype=grad.dtype)
        inputs.append(piece)
    dist.get_rank(group=group)
    return inputs


def cpp_copies(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """One ``copy_`` per tensor from C++ (the list API's per-rank copies, CPU dispatch only)."""
    torch._foreach_copy_(dst, src)


def timed(call: Callable[[], object], repeats: int) -> float:
    """Least seconds of ``call`` over ``repeats`` runs (after one warm-up; other load on the machine only adds)."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def fit(sizes: tuple[int, ...], seconds: list[float]) -> tuple[float, float]:
    """(a, b) of seconds = a + b x world_size, least squares."""
    b, a = np.polyfit(np.asarray(sizes, dtype=float), np.asarray(seconds), 1)
    return float(a), float(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    group = dist.new_group([0])
    weight, shard, grad = torch.zeros(4, 4), torch.zeros(1), torch.zeros(2240 * 4)
    rows = {
        "all-gather loop (narrow + get_rank per rank)": [
            timed(lambda n=n: gather_loop(n, group, shard, weight), args.repeats) for n in SIZES],
        "reduce-scatter loop (bounds + narrow per rank)": [
            timed(lambda n=n: reduce_scatter_loop(n, group, grad), args.repeats) for n in SIZES],
        "C++ copy_ per tensor (torch._foreach_copy_, CPU)": [
            timed(lambda n=n: cpp_copies([torch.zeros(1) for _ in range(n)], [torch.ones(1) for _ in range(n)]),
                  args.repeats) - timed(lambda n=n: ([torch.zeros(1) for _ in range(n)], [torch.ones(1) for _ in range(n)]),
                                        args.repeats)
            for n in SIZES],
    }
    print(f"torch {torch.__version__}, world sizes {SIZES}, least of {args.repeats}")
    for name, seconds in rows.items():
        a, b = fit(SIZES, seconds)
        per_size = ", ".join(f"{n}: {s * 1e3:.2f} ms" for n, s in zip(SIZES, seconds, strict=True))
        print(f"{name}: a = {a * 1e6:.1f} us, b = {b * 1e6:.2f} us per rank  ({per_size})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
