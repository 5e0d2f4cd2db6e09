"""DeepSpeed 2021's ZeRO-3 inside a layer's compute (``zero3_gather="per-param"``): the ops of a
layer block, cut at each submodule, with what its hooks do woven in
(:mod:`schedules.passes.zero3_2021_trace` says which weights and gradients; this module the ops).

Per submodule run, from deepspeed/runtime/zero/stage3.py and partition_parameters.py @v0.5.0:

1. the fetch: when it gathers or waits for a weight, ``_synchronize_communication`` ends with
   ``torch.cuda.synchronize()``: the device is idle, every earlier collective has finished (the
   ops before it end first: the task's ops run back to back). Then ``param.norm()`` of every
   parameter of the submodule inside a debug f-string (v0.3.15-v0.5.10): a read of the weight
   and a ``.item()`` per tensor (host op of class "rank_loop", kind "other": eager calls);
2. each weight it gathers (its own, then the prefetched ones): ``torch.zeros`` of the whole
   weight (a write), ``torch.cuda.synchronize()``, the Python loop over the ranks and PyTorch's
   list ``all_gather`` (host op "rank_loop", kind "all_gather": a + n x b seconds for n ranks,
   :mod:`sim.rank_loops`), the NCCL all-gather, then one copy kernel per rank out of the flat
   buffer (op "rank_copies", ProcessGroupNCCL::allgather's "Copy the flattened output tensors to
   the outputs"). A gather's synchronize waits the gather before it, so every gather of a fetch
   but the last runs alone; the last runs on the communication stream beside the compute the host
   issues next, until the next synchronize;
3. the submodule's own kernels (its GEMMs: the forward; in the backward the input and then the
   weight gradient, as autograd runs a Linear's backward);
4. in a backward, the gradient tensors of the submodule before (each its Python loop over the
   ranks, copies into the flat input, NCCL reduce-scatter: ``_reduce_scatter_gradient``) beside
   the compute the host issued before it, after the all-gather of step 2 on the network.

Operations on the communication and host lanes after a submodule's kernels run beside those
kernels as one chain (:func:`sim.costing.layout_ops`): a GPU op after the host ops that issue it
and after the op before it on its stream. Stated approximations: the collectives of one
submodule run one after the other on the network (the all-gather and the reduce-scatter run on
two streams in DeepSpeed but share the NICs); the chain ends at the block's end (a layer
boundary acts as a synchronize); the copies' and fills' HBM traffic is priced, not their
interference with compute (collectives inside a compute task do not slow it: :mod:`sim.interference`
slows compute beside communication tasks only). The embedding's and the head's gathers stay the
data-parallel pass's (:mod:`schedules.passes.dp`).

Checks (tests/sim/test_deepspeed_2021.py): DeepSpeed #1174's BERT 5B on one p4d (ZeRO-3 forward
~480 ms against ZeRO-2's ~60 ms) to within a factor 2; GPT-3 175B at a fixed global batch keeps
more than 0.6 of its step from 384 to 768 A100 and does not shorten to 1,536. Known gap: DeepSpeed
PR #1453 measured the 2021 code at 0.58-0.60x the fixed code's TFLOPS on 64 p4d GPUs (RoBERTa 10B
and 50B); these mechanisms, with the ring FIFO window of its per-weight gathers across EFA
(topo/nccl_window.py), give 0.60x for 10B and 0.75x for 50B (0.82-0.88x without the window; the
fixed code itself simulates faster than measured on that setup), so something of the 2021 stack
on that cluster is still missing for the larger model.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass, Phase
from schedules.model import ModelSpec
from schedules.passes.zero3_2021_trace import UseEvents, pass_events
from schedules.plan import ParallelPlan

FETCH_SYNC_CALLS = 3
"""Eager PyTorch calls of ``_synchronize_communication`` (``handle.wait()``,
``comm_stream.synchronize()``, ``torch.cuda.synchronize()``)."""
NORM_CALLS = 2
"""Eager calls per parameter of the debug f-string: ``param.norm()`` and its ``.item()``."""


def _begins(layer: int, events: tuple[UseEvents, ...]) -> list[str]:
    """The name of the op each use's kernels begin with."""
    suffix = {"": "", ".recompute": ".recompute", ".backward": ".dgrad"}
    return [f"L{layer}.{e.use.module}{suffix[e.use.tag]}" for e in events]


def _split_qkv(model: ModelSpec, tp: int, layer: int, ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """Without a fused QKV (``model.fused_qkv`` False) the projection runs as three GEMMs, one per
    module (query, key, value; in reverse in the backward, as autograd reaches them): the
    projection's op cut along its QKV width, its FLOPs shared by width."""
    if model.fused_qkv:
        return ops
    h, kv = model.hidden_size, model.kv_size
    widths = {"q": h / tp, "k": kv / tp, "v": kv / tp}
    total = sum(widths.values())
    out: list[Op] = []
    for op in ops:
        suffix = op.name.removeprefix(f"L{layer}.qkv")
        if suffix == op.name or suffix not in ("", ".recompute", ".dgrad", ".wgrad"):
            out.append(op)
            continue
        order = ("v", "k", "q") if suffix in (".dgrad", ".wgrad") else ("q", "k", "v")
        out += [_narrowed(op, f"L{layer}.{m}{suffix}", widths[m] / total, round(total)) for m in order]
    return tuple(out)


def _narrowed(op: Op, name: str, share: float, width: int) -> Op:
    """``op`` as the ``share`` of its GEMM along the dimension of size ``width``."""
    narrowed = dataclasses.replace(op, name=name, flops=op.flops * share)
    for dim in ("n", "k", "m"):
        if getattr(op, dim) == width:
            return dataclasses.replace(narrowed, **{dim: max(1, round(width * share))})  # type: ignore[arg-type]
    return narrowed


def _segments(ops: tuple[Op, ...], layer: int, events: tuple[UseEvents, ...]) -> tuple[list[Op], list[list[Op]]]:
    """``ops`` cut at each use's first op: (ops before the first use, each use's ops), a module's
    weight gradient moved after its input gradient."""
    begins = _begins(layer, events)
    wgrads = {f"L{layer}.{e.use.module}.wgrad": e.use.module for e in events if e.use.tag == ".backward"}
    moved = {op.name: op for op in ops if op.name in wgrads}
    pre: list[Op] = []
    segments: list[list[Op]] = []
    for op in ops:
        if op.name in moved:
            continue
        if op.name in begins:
            if begins.index(op.name) != len(segments):
                raise ValueError(f"zero3_gather=per-param: op {op.name!r} out of the submodule order {begins}")
            segments.append([])
        (segments[-1] if segments else pre).append(op)
        wgrad = moved.get(op.name.replace(".dgrad", ".wgrad")) if op.name.endswith(".dgrad") else None
        if wgrad is not None:
            segments[-1].append(wgrad)
    if len(segments) != len(events):
        raise ValueError(f"zero3_gather=per-param: found {len(segments)} of the submodules {begins} in layer {layer}")
    return pre, segments


@dataclasses.dataclass
class _Chain:
    """Ops that run beside the compute issued since the last device synchronize."""

    ops: list[Op] = dataclasses.field(default_factory=list)
    compute: int = 0  # compute-lane ops issued since

    def close(self) -> list[Op]:
        """The chain placed after the compute it ran beside (alone when there was none)."""
        out = [dataclasses.replace(op, concurrent=True, beside=self.compute) if self.compute else op
               for op in self.ops]
        self.ops, self.compute = [], 0
        return out


class _Weaver:
    """The ops of one layer block with the hooks' work woven in (module docstring)."""

    def __init__(self, plan: ParallelPlan, layer: int, kind: Kind) -> None:
        self.plan, self.layer, self.kind = plan, layer, kind
        self.out: list[Op] = []
        self.chain = _Chain()

    def add(self, ops: list[Op]) -> None:
        self.out += ops
        self.chain.compute += sum(op.lane == Lane.COMPUTE for op in ops)

    def sync(self) -> None:
        self.out += self.chain.close()

    def host(self, kind: Kind, name: str, calls: int = 1) -> Op:
        return Op(Lane.HOST, kind, f"L{self.layer}.{name}", OpClass.RANK_LOOP, dim=self.plan.shard_dim,
                  layer=self.layer, batch=calls)

    def memory(self, name: str, size: float) -> Op:
        return Op(Lane.COMPUTE, self.kind, f"L{self.layer}.{name}", OpClass.ELEMENTWISE, bytes=size, layer=self.layer)

    def gather(self, params: float, name: str) -> tuple[list[Op], list[Op]]:
        """(ops before the collective: the fill and the host's loop; the collective and its copies)."""
        size = params * self.plan.param_gather_bytes
        dim, layer = self.plan.shard_dim, self.layer
        return ([self.memory(f"{name}.zeros", size), self.host(Kind.ALL_GATHER, f"{name}.ag_loop")],
                [Op(Lane.DP, Kind.ALL_GATHER, f"L{layer}.{name}_ag", OpClass.ALL_GATHER, bytes=size, dim=dim, layer=layer),
                 Op(Lane.DP, Kind.ALL_GATHER, f"L{layer}.{name}_ag.copies", OpClass.RANK_COPIES, bytes=size, dim=dim,
                    layer=layer)])

    def reduce_scatter(self, params: float, name: str) -> list[Op]:
        """The host's loop, the copies into the flat input, the NCCL reduce-scatter of one tensor."""
        size, dim, layer = params * self.plan.grad_reduce_bytes, self.plan.shard_dim, self.layer
        return [self.host(Kind.REDUCE_SCATTER, f"{name}.rs_loop"),
                Op(Lane.DP, Kind.REDUCE_SCATTER, f"L{layer}.{name}_rs.copies", OpClass.RANK_COPIES, bytes=size,
                   dim=dim, layer=layer),
                Op(Lane.DP, Kind.REDUCE_SCATTER, f"L{layer}.{name}_rs", OpClass.REDUCE_SCATTER, bytes=size, dim=dim,
                   layer=layer)]

    def use(self, e: UseEvents, ops: list[Op], reduced: tuple[float, ...]) -> None:
        """One submodule run: fetch, gathers, its kernels, the reduce-scatters issued beside them."""
        name = e.use.module + e.use.tag
        if e.sync or e.own or e.prefetched:
            self.sync()
        calls = NORM_CALLS * len(e.use.tensors) + (FETCH_SYNC_CALLS if e.sync else 0)
        self.out += [self.host(Kind.OTHER, f"{name}.fetch", calls),
                     self.memory(f"{name}.norm", sum(e.use.tensors) * self.plan.element_bytes)]
        gathers = [(p, f"{name}.own") for p in e.own] + [(p, f"{name}.prefetch{i}") for i, p in enumerate(e.prefetched)]
        for i, (params, label) in enumerate(gathers):
            before, collective = self.gather(params, label)
            self.sync()
            self.out += before
            if i < len(gathers) - 1:
                self.out += collective
            else:
                self.chain.ops += collective
        self.add(ops)
        for j, params in enumerate(reduced):
            self.chain.ops += self.reduce_scatter(params, f"{name}.t{j}")


@lru_cache(maxsize=4096)
def weave_layer(model: ModelSpec, plan: ParallelPlan, phase: str, layer: int, ops: tuple[Op, ...],
                first: bool, last: bool) -> tuple[Op, ...]:
    """Block ``layer``'s ops of a pass (``first``/``last``: the pass's first/last block) with
    DeepSpeed 2021's ZeRO-3 woven in (module docstring). The first block of a backward reduces no
    earlier layer's gradients; the last reduce-scatters its own last ones at its end (the
    backward's epilogue, ``independent_gradient_partition_epilogue``)."""
    if phase not in (Phase.F, Phase.B):
        raise ValueError(f"zero3_gather=per-param: phase {phase!r} is not modelled (no split backward)")
    events = pass_events(model, plan, phase)
    kind = Kind.FWD if phase == Phase.F else Kind.BWD
    pre, segments = _segments(_split_qkv(model, plan.tp, layer, ops), layer, events)
    weaver = _Weaver(plan, layer, kind)
    weaver.out += pre
    for i, (e, seg) in enumerate(zip(events, segments, strict=True)):
        weaver.use(e, seg, () if first and i == 0 else e.reduced)
    weaver.sync()
    if last and phase == Phase.B:
        for j, params in enumerate(events[-1].use.tensors):
            weaver.out += weaver.reduce_scatter(params, f"epilogue.t{j}")
    return tuple(weaver.out)
