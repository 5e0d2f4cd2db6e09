"""Prices of calls built by a loop over a group's ranks: DeepSpeed 2021's per-parameter ZeRO-3
collectives (:mod:`schedules.passes.zero3_2021`). Ops of class "rank_loop" are host time, of class
"rank_copies" the list API's copy kernels; ``ranks`` is the size of the op's group.

Host seconds of one call (op class "rank_loop", by the op's kind):

- all_gather: ``A_GATHER_S + ranks x (B_GATHER_LOOP_S + CPP_LAUNCH_HOST_S)``: DeepSpeed's
  ``_allgather_param`` loop (``flat.narrow`` and ``torch.distributed.get_rank(group=...)`` per
  rank), then one C++ ``copy_`` launch per rank in PyTorch's list ``all_gather``;
- reduce_scatter: ``A_RS_S + ranks x (B_RS_LOOP_S + CPP_LAUNCH_HOST_S)``:
  ``_reduce_scatter_gradient``'s loop (slice bounds and ``narrow`` per rank), then the list
  ``reduce_scatter``'s copy of each input into the flat buffer;
- other: ``calls`` eager PyTorch calls (``op.batch``) of :data:`topo.host_overheads.EAGER_OP_HOST_S`.

Facts:

- B_GATHER_LOOP_S 2.8 us and B_RS_LOOP_S 2.45 us per rank: measured on this project's machine
  (torch 2.13, CPU) by ``python bench/zero3_2021_host.py --repeats 50``, which runs DeepSpeed
  v0.5.0's two loops at 64-2,240 ranks and fits a + b x ranks (all-gather loop 2.74-2.79 us,
  reduce-scatter loop 2.42-2.46 us per rank over two runs; intercepts within +-40 us of 0).
- CPP_LAUNCH_HOST_S 1 us per copy launched from C++ (:data:`sim.host_sync.CPP_LAUNCH_HOST_S`,
  pytorch/pytorch #41383); the same script times the C++ dispatch of ``copy_`` at 0.40 us per
  tensor on CPU tensors (no CUDA launch), below it.
- A_GATHER_S: DeepSpeed issue #1069 (zarzen, 2021-06-21, nsys on one p4d, 8 ranks, DeepSpeed of
  that month): per parameter all-gather "the pre_launch typically takes 130us, the launch takes
  250us about", less the 8 ranks' loop and copies counted above.
- A_RS_S: the same list-API launch (250 us, less its 8 copies) for a reduce_scatter, which
  ProcessGroupNCCL builds the same way (a flat buffer, one copy per rank, the collective); no
  separate measurement of it was found.

Copy kernels (op class "rank_copies"): ``ranks`` kernels on the communication stream, each the
device's ``kernel_overhead_s``, moving the op's bytes once (read and write) at the element-wise
rate. Units: seconds, bytes.
"""

from __future__ import annotations

from core.errors import invalid
from core.vocab import Kind, OpClass
from sim.host_sync import CPP_LAUNCH_HOST_S
from topo.compute import compute_time_s
from topo.device import DeviceSpec
from topo.host_overheads import EAGER_OP_HOST_S

B_GATHER_LOOP_S = 2.8e-6
B_RS_LOOP_S = 2.45e-6
LIST_LAUNCH_RANKS = 8  # the ranks of DeepSpeed #1069's measurement (one p4d)
A_GATHER_S = 130e-6 + 250e-6 - LIST_LAUNCH_RANKS * (B_GATHER_LOOP_S + CPP_LAUNCH_HOST_S)
A_RS_S = 250e-6 - LIST_LAUNCH_RANKS * CPP_LAUNCH_HOST_S


def rank_loop_s(kind: Kind, ranks: int, calls: int) -> float:
    """Host seconds of ``calls`` calls of ``kind`` over a group of ``ranks`` (module docstring)."""
    if kind == Kind.ALL_GATHER:
        return calls * (A_GATHER_S + ranks * (B_GATHER_LOOP_S + CPP_LAUNCH_HOST_S))
    if kind == Kind.REDUCE_SCATTER:
        return calls * (A_RS_S + ranks * (B_RS_LOOP_S + CPP_LAUNCH_HOST_S))
    if kind == Kind.OTHER:
        return calls * EAGER_OP_HOST_S
    raise invalid("kind", str(kind), f"a {OpClass.RANK_LOOP} op is an all_gather, a reduce_scatter or other")


def rank_copies_s(device: DeviceSpec, ranks: int, size: float, dtype: str) -> float:
    """Seconds of ``ranks`` copy kernels moving ``size`` bytes in all (read and write)."""
    return compute_time_s(device, OpClass.ELEMENTWISE, 0.0, 2 * size, dtype) + (ranks - 1) * device.kernel_overhead_s
