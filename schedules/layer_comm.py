"""The tensor- and context-parallel communication of one transformer block, as ops inside its
compute task (Shoeybi et al. 2019; Korthikanti et al. 2022): TP all-reduces (without sequence
parallelism) or all-gathers and reduce-scatters around each sub-block, ring attention's K/V
exchange under the attention kernel, and how a collective runs beside the matmul it feeds or
follows when the stack overlaps them (``tp_comm_overlap``). Sizes: ``hidden_bytes`` is one
micro-batch's activations of the block on this rank, ``kv_block_bytes`` one K/V block."""

from __future__ import annotations

import dataclasses

from core.groups import CP, TP
from core.taskgraph import Op, collective_op
from core.vocab import Collective, Kind, Lane, OpClass
from schedules.plan import ParallelPlan
from schedules.tp_overlap_gemms import TP_OVERLAP_GEMMS, TpOverlapGemm


def tp_ops(plan: ParallelPlan, hidden_bytes: float, layer: int, where: str, backward: bool) -> tuple[Op, ...]:
    """TP communication around one sub-block ("attn" or "mlp") at its output (forward sense)."""
    if plan.tp == 1:
        return ()
    size = hidden_bytes
    if not plan.sequence_parallel:
        return (Op(Lane.TP, Kind.ALL_REDUCE, f"L{layer}.{where}.tp_ar", OpClass.ALL_REDUCE, bytes=size,
                   dim=TP, layer=layer),)
    coll = Collective.ALL_GATHER if backward else Collective.REDUCE_SCATTER
    return (collective_op(Lane.TP, coll, f"L{layer}.{where}.tp_{'ag' if backward else 'rs'}",
                          bytes=size, dim=TP, layer=layer),)


def sp_gather(plan: ParallelPlan, hidden_bytes: float, layer: int, where: str, backward: bool) -> tuple[Op, ...]:
    """SP communication at a sub-block's input: all-gather (forward) / reduce-scatter (backward)."""
    if plan.tp == 1 or not plan.sequence_parallel:
        return ()
    coll = Collective.REDUCE_SCATTER if backward else Collective.ALL_GATHER
    return (collective_op(Lane.TP, coll, f"L{layer}.{where}.sp_{'rs' if backward else 'ag'}",
                          bytes=hidden_bytes, dim=TP, layer=layer),)


def cp_ops(plan: ParallelPlan, kv_block_bytes: float, layer: int, factor: int) -> tuple[Op, ...]:
    """Ring-attention K/V traffic (cp-1 hops), concurrent with the attention kernel."""
    if plan.cp == 1:
        return ()
    return (Op(Lane.CP, Kind.SEND, f"L{layer}.cp_kv", OpClass.P2P, bytes=factor * (plan.cp - 1) * kv_block_bytes,
               dim=CP, layer=layer, concurrent=True),)


def beside(plan: ParallelPlan, comms: tuple[Op, ...], matmuls: tuple[Op, ...], comm_first: bool) -> tuple[Op, ...]:
    """Sequence-parallel collectives and the matmul(s) they feed (``comm_first``: an all-gather of
    the input) or follow (a reduce-scatter of the output): one after the other, or, with
    ``plan.tp_comm_overlap`` (Transformer Engine's userbuffers behind Megatron-Core's
    ``--tp-comm-overlap``; torch's async TP), the collective running beside the adjacent matmul,
    which the stack cuts into chunks, each its own GEMM
    (:data:`schedules.tp_overlap_gemms.TP_OVERLAP_GEMMS`: ``Op.split``, ``Op.split_streams``, priced by
    :func:`sim.gemm_pricing.decomposed_gemm_s`), and pipelines with the collective chunk by chunk
    (``Op.chunks``; all of ``matmuls`` when several share the collective, ``Op.beside``): the
    pair takes max(matmul, collective + matmul / chunks), :func:`sim.costing.layout_ops`; a
    "bulk" overlap runs the whole matmul beside the whole collective: max(matmul, collective).
    A stack that overlaps a reduce-scatter only after a single matmul runs it after several."""
    if not comms:
        return matmuls
    if not (plan.tp_comm_overlap and plan.sequence_parallel):
        comms = _with_layout_copies(plan, comms, matmuls[0].kind)
        return comms + matmuls if comm_first else matmuls + comms
    role = ("ag" if comms[0].op_class == OpClass.ALL_GATHER else "rs") + ("_fprop" if matmuls[0].kind == Kind.FWD else "_dgrad")
    gemm = TP_OVERLAP_GEMMS[plan.framework][role]
    if gemm.one_producer and len(matmuls) > 1:
        return comms + matmuls if comm_first else matmuls + comms
    chunks = gemm.resolved(plan.tp)
    return (tuple(_decomposed(op, gemm, chunks) for op in matmuls)
            + tuple(dataclasses.replace(op, concurrent=True, chunks=chunks if gemm.pipelined else 1,
                                        own_chunk=gemm.own_chunk, beside=len(matmuls)) for op in comms))


def _decomposed(op: Op, gemm: TpOverlapGemm, chunks: int) -> Op:
    """Matmul ``op`` run as ``chunks`` GEMMs, each 1/chunks of its ``gemm.axis`` (rounded up to
    whole rows or columns); ``flops`` stays the whole matmul's."""
    if chunks == 1 or op.m == 0:
        return op
    if gemm.axis == "n":
        return dataclasses.replace(op, n=-(-op.n // chunks), split=chunks, split_streams=gemm.streams)
    return dataclasses.replace(op, m=-(-op.m // chunks), split=chunks, split_streams=gemm.streams)


def _with_layout_copies(plan: ParallelPlan, comms: tuple[Op, ...], kind: Kind) -> tuple[Op, ...]:
    """``comms`` with the copies a batch-first activation layout adds around sequence-parallel
    collectives (``plan.activation_layout``): PyTorch's functional collectives, which DTensor runs,
    gather and scatter on dim 0, so an all-gather on the sequence (dim 1 of [batch, seq, hidden])
    re-concatenates its result (``torch.cat(torch.chunk(res, group, dim=0), dim=1)``: a read and a
    write of the gathered activation; a view when the batch is one sequence under "bsh-view") and a
    reduce-scatter on it first concatenates its input's chunks along dim 0 (always a copy of the
    full activation); on the compute stream, priced as memory traffic (torch/distributed/
    _functional_collectives.py ``all_gather_tensor``/``reduce_scatter_tensor``, PyTorch #96226 and #113324,
    2023; the view for one sequence from #169404, 2025-12). The cat's output (one more full
    activation while the collective's buffer is alive) is not added to the memory model. Megatron's [seq, batch, hidden]
    gathers and scatters dim 0 in place: none."""
    layout = plan.activation_layout
    if layout == "sbh":
        return comms
    out: list[Op] = []
    for op in comms:
        copy = Op(Lane.COMPUTE, kind, f"{op.name}.cat", OpClass.ACTIVATION, bytes=2 * op.bytes, layer=op.layer)
        if op.op_class == OpClass.REDUCE_SCATTER:
            out += [copy, op]
        elif op.op_class == OpClass.ALL_GATHER and not (layout == "bsh-view" and plan.microbatch_size == 1):
            out += [op, copy]
        else:
            out.append(op)
    return tuple(out)
