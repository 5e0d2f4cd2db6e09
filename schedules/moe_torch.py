"""The included trainer's MoE layer (framework "torch"), where it differs from Megatron-Core's
(:mod:`schedules.moe_ops`): its ops run outside DTensor (:func:`runs_on_local_tensors`), its
experts run one call per expert and weight (:func:`per_expert_calls`), and it exchanges the
per-expert counts with an all-to-all before the tokens (:func:`with_counts_exchange`).

Under tensor parallelism the trainer's dense ops go through DTensor (``parallelize_module``:
column/row-parallel linears, sequence-parallel norms), whose dispatch a CPU profile prices as
``device.tp_overhead_s`` per op and ``device.tp_host_overhead_s`` per host gap. Its MoE block does
not: :class:`profiler.trainer.moe_parallel.MoETensorParallel` hands the block the local tensor of
its sequence-parallel input, and :func:`profiler.trainer.moe.local` hands the router, the routed
and the shared experts the local tensors of their replicated parameters, so the router, top-k,
permutations, token exchanges and expert matmuls run as plain ATen ops (the recorded trace:
``aten::matmul`` of the experts at ~10 µs against ~100 µs for a DTensor ``aten::linear``,
``traces/ep2tp2dp2-moe`` rank 0). :func:`runs_on_local_tensors` names those ops by their role in
:mod:`schedules.moe_ops` so the pricer leaves the DTensor overheads off them.
"""

from __future__ import annotations

import dataclasses

from core.taskgraph import Op, matmul
from core.vocab import OpClass
from schedules.moe_kernels import COUNT_BYTES

# Roles (the op name after "L<layer>." without the pass suffixes) of an MoE layer's
# feed-forward ops (schedules/moe_ops.py), all computed on local tensors by the trainer.
MOE_LOCAL_ROLES = frozenset({
    "router", "router.topk", "experts.counts", "permute", "experts.sort", "experts.fc1", "experts.act",
    "experts.act_clamp", "experts.fc2", "experts.fc2_bias", "experts.unsort", "unpermute",
    "shared.fc1", "shared.w1", "shared.w3", "shared.act", "shared.fc2",
})
_SUFFIXES = (".recompute", ".dgrad", ".wgrad")


def op_role(name: str) -> str:
    """``L3.experts.fc1.dgrad`` (or one of its calls, ``L3.experts.fc1.dgrad#2``) ->
    ``experts.fc1``; a name without a layer prefix: itself."""
    name = name.split("#", 1)[0]
    role = name.split(".", 1)[1] if name[:1] == "L" and "." in name and name[1:name.index(".")].isdigit() else name
    for suffix in _SUFFIXES:
        role = role.removesuffix(suffix)
    return role


def runs_on_local_tensors(op: Op) -> bool:
    """The trainer runs compute op ``op`` of an MoE layer on plain (non-DTensor) tensors."""
    return op.layer >= 0 and op_role(op.name) in MOE_LOCAL_ROLES


def with_counts_exchange(ops: tuple[Op, ...], num_experts: int) -> tuple[Op, ...]:
    """``ops`` of a layer's forward with the trainer's counts exchange before each dispatch: the
    included trainer first sends every EP peer the number of rows it routes to each of the
    peer's experts (an ``all_to_all_single`` of ``num_experts`` int64 per rank,
    :func:`profiler.trainer.moe_dispatch._run_remote`), then the rows; the trace shows 5
    ``gloo:all_to_all`` per MoE layer and micro-batch, the first of ``8 x num_experts`` bytes
    (int64 counts, as Megatron-Core's: :data:`schedules.moe_kernels.COUNT_BYTES`).
    Megatron-Core all-gathers the counts instead (:mod:`schedules.moe_ops`, ``experts.counts_ag``)."""
    out: list[Op] = []
    for op in ops:
        if op.op_class == OpClass.ALL_TO_ALL and op_role(op.name) == "dispatch" and not op.name.endswith(".dgrad"):
            out.append(Op(op.lane, op.kind, op.name.replace(".dispatch", ".counts_a2a", 1), op.op_class,
                          bytes=COUNT_BYTES * num_experts, dim=op.dim, layer=op.layer))
        out.append(op)
    return tuple(out)


def per_expert_calls(ops: tuple[Op, ...], up: int, experts_local: int) -> tuple[Op, ...]:
    """``ops`` with the routed experts' grouped work as the trainer's calls: its experts run one
    after the other (:meth:`profiler.trainer.moe.Experts.forward`), each ``silu(x @ w1) * (x @ w3)
    @ w2``: per local expert ``up`` input matmuls and one output matmul, a SiLU and a product
    (forward and backward: one autograd ``MmBackward0`` per matmul gives its input and its weight
    gradient), where Megatron-Core runs one grouped GEMM per projection over the local experts
    and one fused activation (:mod:`schedules.moe_ops`). The trace of ``traces/ep2tp2dp2-moe``
    shows 24 expert ``aten::matmul`` per rank and step: 4 layers x 2 local experts x 3. FLOPs and
    bytes are kept; each call is its own op (named ``<op>#<call>``)."""
    out: list[Op] = []
    for op in ops:
        role = op_role(op.name)
        if role in ("experts.fc1", "experts.fc2") and op.op_class == OpClass.GEMM and op.m > 0:
            split = up if role == "experts.fc1" else 1  # w1 and w3 are separate matmuls
            m, n, k = op.m, op.n, op.k
            if op.name.endswith(".dgrad"):
                k //= split  # (rows x up·f) gradient times each (f x h) weight's transpose
            else:
                n //= split  # forward: (rows x h)·(h x f) per weight; wgrad: (h x rows)·(rows x f)
            out += [matmul(op.lane, op.kind, f"{op.name}#{i}", m, n, k, layer=op.layer)
                    for i in range(op.batch * split)]
        elif role == "experts.act" and op.op_class == OpClass.ACTIVATION:
            calls = 2 * experts_local  # SiLU and the product, per local expert
            out += [dataclasses.replace(op, name=f"{op.name}#{i}", bytes=op.bytes / calls, batch=1)
                    for i in range(calls)]
        else:
            out.append(op)
    return tuple(out)
