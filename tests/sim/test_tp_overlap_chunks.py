"""Tensor-parallel communication overlapped with its matmul, pipelined in tp chunks: the pair
takes max(M, C + M/n) (sim.costing.layout_ops; the two extreme paths of a two-stage pipeline of n
chunks, one of which needs no communication)."""

from __future__ import annotations

import dataclasses

import pytest

from core.groups import TP
from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass
from schedules.layer_ops import forward_ops, layer_shape
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from sim.costing import layout_ops

MATMUL = Op(Lane.COMPUTE, Kind.FWD, "mm", OpClass.GEMM, flops=1.0)
COMM = Op(Lane.TP, Kind.FWD, "rs", OpClass.REDUCE_SCATTER, bytes=1.0, dim=TP, concurrent=True)


@pytest.mark.parametrize(("m", "c", "n"), [(8.0, 2.0, 8), (8.0, 7.5, 8), (8.0, 12.0, 8), (3.0, 3.0, 2), (5.0, 1.0, 4)])
def test_pair_takes_the_longer_pipeline_path(m: float, c: float, n: int) -> None:
    cost = layout_ops([MATMUL, dataclasses.replace(COMM, chunks=n)], [m, c])
    assert cost.duration_s == pytest.approx(max(m, c + m / n))
    assert [s.offset_s for s in cost.segments] == [0.0, 0.0]  # the collective starts with the matmul


@pytest.mark.parametrize(("m", "c", "n"), [(8.0, 2.0, 4), (8.0, 7.5, 4), (8.0, 12.0, 4), (3.0, 3.0, 2)])
def test_every_chunk_communicated_adds_the_last_chunks_collective(m: float, c: float, n: int) -> None:
    """Transformer Engine's pipelined reduce-scatter sends every chunk, the last after the whole
    matmul: max(M + C/n, C + M/n)."""
    cost = layout_ops([MATMUL, dataclasses.replace(COMM, chunks=n, own_chunk=False)], [m, c])
    assert cost.duration_s == pytest.approx(max(m + c / n, c + m / n))


def test_beside_several_matmuls_pipelines_their_sum() -> None:
    """One fused op's matmuls (torch's all-gather matmul of q, k, v): max(sum M, C + sum M / n),
    from the first one's start; an op of another lane between them runs in turn."""
    host = Op(Lane.HOST, Kind.FWD, "gap", OpClass.FIXED, duration_s=1.0)
    comm = dataclasses.replace(COMM, chunks=4, beside=3)
    cost = layout_ops([MATMUL, MATMUL, host, MATMUL, comm], [2.0, 3.0, 1.0, 3.0, 9.0])
    assert cost.segments[-1].offset_s == 0.0
    assert cost.duration_s == pytest.approx(max(9.0, 9.0 + 8.0 / 4))
    short = layout_ops([MATMUL, MATMUL, MATMUL, comm], [2.0, 3.0, 3.0, 1.0])
    assert short.duration_s == pytest.approx(8.0)


def test_one_chunk_is_plain_overlap_and_sequence_adds() -> None:
    assert layout_ops([MATMUL, COMM], [8.0, 7.5]).duration_s == 8.0
    assert layout_ops([MATMUL, dataclasses.replace(COMM, concurrent=False)], [8.0, 7.5]).duration_s == 15.5


def test_overlapped_sp_collectives_carry_their_stacks_chunks() -> None:
    """All-gathers pipeline in tp chunks (TE ring exchange, torch async TP); Transformer Engine's
    forward reduce-scatters in its "pipeline" method's num_splits = 4 (initialize_ub defaults),
    torch's in tp (schedules.tp_overlap_gemms.TP_OVERLAP_GEMMS)."""
    model = get_model("llama3-70b")
    for tp in (2, 8):
        for framework, rs_chunks in (("megatron", 4), ("torch", tp)):
            plan = ParallelPlan(tp=tp, dp=1, global_batch=1, sequence_parallel=True, tp_comm_overlap=True,
                                framework=framework)
            comms = [op for op in forward_ops(plan, layer_shape(model, plan), 0) if op.lane == "comm.tp"]
            assert comms and all(op.concurrent for op in comms)
            assert {op.chunks for op in comms if op.op_class == "all_gather"} == {tp}
            assert {op.chunks for op in comms if op.op_class == "reduce_scatter"} == {rs_chunks}
    plan = ParallelPlan(tp=8, dp=1, global_batch=1, sequence_parallel=True)
    assert all(not op.concurrent and op.chunks == 1
               for op in forward_ops(plan, layer_shape(model, plan), 0) if op.lane == "comm.tp")
