"""The host synchronisation of an MoE layer's token dispatch, and the launch-bound interval it
leaves behind.

Facts:

- Megatron-Core's all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``,
  megatron/core/transformer/moe/token_dispatcher.py @ b0cc2706ddc60d2aefd5fff346445b5c013036a8,
  the Megatron-LM of Megatron-Bridge v0.3.0): dropless, its ``preprocess`` reduces the routing
  map to per-expert token counts on the GPU and all-gathers them over the TP x EP group; the
  counts are copied to the host on a side stream before the first permutation
  (``cuda_dtoh_point = "before_permutation_1"``; "before_ep_alltoall" when CUDA graphs capture
  ``moe_preprocess``) and the host blocks on ``d2h_event.synchronize()`` before the all-to-all
  (``cuda_sync_point = "before_ep_alltoall"`` when ep > 1 or tp > 1, "before_finish" otherwise),
  whose split sizes are host lists. ``--moe-pad-expert-input-to-capacity`` (``drop_and_pad``)
  removes it. Once per MoE layer forward (the backward's all-to-all reuses the splits), and again
  in each recomputed forward that redoes the dispatch (full recomputation).
- DeepEP's normal dispatch (deepseek-ai/DeepEP docs/legacy.md: "an implicit CPU wait for GPU
  received count signal will be involved") waits the same way, once per forward dispatch (the
  backward's dispatch reuses the cached handle, which skips it).

Mechanism: at the synchronisation the host has waited for the GPU, so the GPU's queue holds only
what the host issued after the copy (the permutation) and then waits for every kernel the host
issues next. Until the next synchronisation the host issues op j's kernels H_j after it woke
(the cumulative host time of ops 0..j) and the GPU runs them in order, so the interval lasts

    T = max_j (H_j + sum_(i >= j) k_i)

(:func:`topo.host_overheads.launch_bound_time_s` with a host time per op instead of one per
kernel); ``T - sum k`` is the time the GPU waits, priced on the synchronisation op
(:func:`price_host_syncs`).

Stated approximations: the interval to the next MoE layer's synchronisation is this layer's own
ops in the task, rotated at the synchronisation (the next layer's are alike); the op issued just
before the synchronisation (the permutation) heads the interval with no host time (it was issued
before the wait); each op's host time is its launch count (``schedules.moe_kernels.forward_launches``)
times :data:`PY_LAUNCH_HOST_S`, plus :data:`CPP_LAUNCH_HOST_S` per kernel a C++ loop issues;
the first layer of a chunk starts no earlier than the host; the op sits after the permutation
also where Megatron-Core waits later (with ep = tp = 1, "before_finish": after the sort).

Host time per launch, each a fact:
- :data:`PY_LAUNCH_HOST_S` = :data:`topo.host_overheads.MODULE_OP_HOST_S` (45 us): eager PyTorch
  through nn.Modules, host time per kernel launched (facebookresearch/sam2 #768: 53.7 ms of host
  time for 1185 launches); Megatron-Core's MoE layer issues its kernels from nn.Modules
  (``MoELayer``, ``TopKRouter``, the dispatcher, ``TEGroupedMLP``), the plan of
  docs/model-mechanisms.md ("MODULE_OP_HOST_S per kernel for module-heavy code").
- :data:`CPP_LAUNCH_HOST_S` = 1 us: a PyTorch op's C++ part, "~1 us from C++" (a maintainer,
  pytorch/pytorch #41383), for each GEMM Transformer Engine's grouped GEMM issues in its C++ loop
  (``multi_stream_cublas_gemm``, one cuBLAS call per group).
Units: seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.errors import invalid
from core.taskgraph import Op
from core.vocab import Lane, OpClass
from schedules.moe_kernels import forward_launches
from topo.host_overheads import MODULE_OP_HOST_S

PY_LAUNCH_HOST_S = MODULE_OP_HOST_S
CPP_LAUNCH_HOST_S = 1e-6


def interval_time_s(kernel_s: Sequence[float], issue_s: Sequence[float]) -> float:
    """Seconds from the host's wake-up to the last kernel's end: op j's kernels run for
    ``kernel_s[j]`` seconds and the host needs ``issue_s[j]`` seconds to issue them after
    issuing op j-1's (module docstring)."""
    k = np.asarray(kernel_s, dtype=float)
    h = np.asarray(issue_s, dtype=float)
    if k.shape != h.shape or k.ndim != 1:
        raise invalid("issue_s", issue_s, f"expected one host time per kernel ({len(k)})")
    for name, values in (("kernel_s", k), ("issue_s", h)):
        if (values < 0).any() or not np.isfinite(values).all():
            raise invalid(name, list(values), "expected numbers >= 0")
    if len(k) == 0:
        return 0.0
    tail = np.cumsum(k[::-1])[::-1]
    return float((np.cumsum(h) + tail).max())


def exposed_s(kernel_s: Sequence[float], issue_s: Sequence[float]) -> float:
    """Seconds the GPU waits for the host in the interval (its length less the kernels' sum)."""
    return interval_time_s(kernel_s, issue_s) - float(np.sum(kernel_s))


def op_host_s(op: Op, experts_local: int) -> float:
    """Host seconds to issue ``op``'s kernels (module docstring)."""
    python, cpp = forward_launches(op.name, experts_local)
    return python * PY_LAUNCH_HOST_S + cpp * CPP_LAUNCH_HOST_S


def _in_chain(op: Op) -> bool:
    """Ops that run on the GPU's stream in order: compute and inline communication, not the
    host's own spans nor an op that runs beside its predecessor."""
    return op.lane != Lane.HOST and not op.concurrent


def price_host_syncs(ops: Sequence[Op], durations: Sequence[float]) -> list[float]:
    """``durations`` with each host synchronisation op priced as the GPU's wait in the interval
    after it (module docstring); other ops keep theirs."""
    out = list(durations)
    for i, op in enumerate(ops):
        if op.op_class != OpClass.HOST_SYNC:
            continue
        same = [j for j, other in enumerate(ops) if other.layer == op.layer and j != i and _in_chain(other)]
        before = [j for j in same if j < i]
        after = [j for j in same if j > i]
        head = before[-1:]  # issued before the wait: on the GPU's queue when the host wakes
        order = head + after + before
        kernels = [durations[j] for j in order]
        issues = [0.0 if n == 0 and head else op_host_s(ops[j], op.batch) for n, j in enumerate(order)]
        out[i] = exposed_s(kernels, issues)
    return out
