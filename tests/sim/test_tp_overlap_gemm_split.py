"""A matmul that a TP collective overlaps runs as the stack's chunks, each its own GEMM priced by
the shape model (sim.gemm_pricing.decomposed_gemm_s; decompositions from the stacks' source in
schedules.tp_overlap_gemms.TP_OVERLAP_GEMMS), inside the pipeline formula max(M, C + M / n)."""

from __future__ import annotations

import dataclasses

import pytest

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, OpClass
from schedules.layer_ops import backward_input_ops, forward_ops, layer_shape
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from schedules.tp_overlap_gemms import TP_OVERLAP_GEMMS
from sim.gemm_pricing import decomposed_gemm_s
from sim.pricing import TaskCoster
from topo import get_cluster
from topo.collectives import CollectiveModel
from topo.gemm_shape import GemmShape, gemm_math_s, gemm_time_s
from topo.placement import Placement

H100 = get_cluster("dgx-h100", nodes=1).device


def test_one_kernel_is_the_shape_model_plus_its_launch() -> None:
    shape = GemmShape(8192, 3072, 8192)
    assert decomposed_gemm_s(H100, shape, "bf16") == H100.kernel_overhead_s + gemm_time_s(H100, shape, "bf16")


@pytest.mark.parametrize("split", [2, 4, 8])
def test_chunks_on_one_stream_cost_chunks_times_one_chunk(split: int) -> None:
    chunk = GemmShape(8192 // split, 3072, 8192)
    one = H100.kernel_overhead_s + gemm_time_s(H100, chunk, "bf16")
    assert decomposed_gemm_s(H100, chunk, "bf16", split, streams=1) == pytest.approx(split * one)


def test_chunks_on_several_streams_share_waves() -> None:
    chunk = GemmShape(1024, 3072, 8192)
    together = H100.kernel_overhead_s + gemm_time_s(H100, GemmShape(1024, 3072, 8192, 8), "bf16")
    for streams in (2, 3):
        assert decomposed_gemm_s(H100, chunk, "bf16", 8, streams) == pytest.approx(together)
    # tile-aligned chunks that share waves cost what the whole GEMM does
    whole = decomposed_gemm_s(H100, GemmShape(8192, 3072, 8192), "bf16")
    assert together == pytest.approx(whole, rel=1e-9)
    # chunks of 960 rows pad each chunk to 1024 (256-row tiles): more than the whole 7680 rows
    padded = decomposed_gemm_s(H100, GemmShape(960, 3072, 8192), "bf16", 8, 2)
    assert padded > decomposed_gemm_s(H100, GemmShape(7680, 3072, 8192), "bf16")


def test_serial_chunks_pay_wave_quantisation_on_h100() -> None:
    """The issue's figure: 8 chunks of an 8192x3072x8192 GEMM cost 1.33x the whole one in math."""
    ratio = 8 * gemm_math_s(H100, GemmShape(1024, 3072, 8192), "bf16") / gemm_math_s(
        H100, GemmShape(8192, 3072, 8192), "bf16")
    assert ratio == pytest.approx(1.33, abs=0.01)
    serial = decomposed_gemm_s(H100, GemmShape(1024, 3072, 8192), "bf16", 8, streams=1)
    assert serial > 1.3 * decomposed_gemm_s(H100, GemmShape(8192, 3072, 8192), "bf16")


def test_invalid_split_is_refused() -> None:
    with pytest.raises(ValueError, match="split=0"):
        decomposed_gemm_s(H100, GemmShape(8, 8, 8), "bf16", 0)


def _plan(framework: str, overlap: bool = True) -> ParallelPlan:
    return ParallelPlan(tp=8, dp=1, global_batch=2, sequence_parallel=True, tp_comm_overlap=overlap,
                        framework=framework, microbatch_size=2)


def _pairs(ops: tuple[Op, ...]) -> list[tuple[tuple[Op, ...], Op]]:
    """(matmuls, the collective beside them) of each overlapped pair."""
    return [(ops[i - op.beside:i], op) for i, op in enumerate(ops) if op.lane == "comm.tp" and op.concurrent]


def test_transformer_engine_decomposition() -> None:
    """ring exchange: tp row chunks (qkv/fc1 fprop, proj/fc2 dgrad); pipeline: 4 column chunks
    (proj/fc2 fprop); bulk: the whole dgrad of qkv/fc1 beside an unchunked reduce-scatter; 3 streams."""
    model = get_model("llama3-8b")
    plan = _plan("megatron")
    shape = layer_shape(model, plan)
    fwd = _pairs(forward_ops(plan, shape, 0))
    bwd = _pairs(backward_input_ops(plan, shape, 0))
    assert len(fwd) == len(bwd) == 4
    t = round(shape.tokens_local)
    for (mm,), comm in fwd:
        if comm.op_class == "all_gather":
            assert (mm.m, mm.split, mm.split_streams, comm.chunks) == (t // 8, 8, 3, 8)
        else:  # every column chunk reduce-scattered after its GEMM
            assert (mm.m, mm.n, mm.split, mm.split_streams, comm.chunks) == (t, model.hidden_size // 4, 4, 3, 4)
            assert not comm.own_chunk
    for (mm,), comm in bwd:
        if comm.op_class == "all_gather":
            assert (mm.m, mm.split, comm.chunks) == (t // 8, 8, 8)
        else:
            assert (mm.m, mm.split, comm.chunks) == (t, 1, 1)
    assert {c.op_class for _, c in fwd + bwd} == {"all_gather", "reduce_scatter"}


def test_torch_async_tp_decomposition() -> None:
    """fused_all_gather_matmul (every mm of the gathered input: q, k, v; w1, w3) and
    fused_matmul_reduce_scatter (one producing mm: wo, w2; dgrad of wo, w2 after their gathered
    output gradient): tp row chunks, one mm each, on 2 streams. The reduce-scatter of the summed
    input gradients of q, k, v (w1, w3) is not fused: it runs after them."""
    plan = _plan("torch")
    shape = layer_shape(get_model("llama3-8b"), plan)
    t = round(shape.tokens_local)
    fwd = _pairs(forward_ops(plan, shape, 0))
    bwd_ops = backward_input_ops(plan, shape, 0)
    bwd = _pairs(bwd_ops)
    assert sorted(len(mms) for mms, _ in fwd) == [1, 1, 2, 3]  # wo, w2; w1 + w3; q + k + v
    assert [c.op_class for _, c in bwd] == ["all_gather", "all_gather"]
    for mms, comm in fwd + bwd:
        assert comm.chunks == 8 and comm.beside == len(mms)
        assert all((mm.m, mm.split, mm.split_streams) == (t // 8, 8, 2) for mm in mms) and comm.own_chunk
    unfused = [op for op in bwd_ops if op.op_class == "reduce_scatter"]
    assert len(unfused) == 2 and not any(op.concurrent for op in unfused)
    assert all(op.split == 1 for op in bwd_ops if op.name.endswith((".q.dgrad", ".w1.dgrad")))
    assert TP_OVERLAP_GEMMS["torch"]["rs_dgrad"].one_producer


def test_no_overlap_leaves_matmuls_whole() -> None:
    for framework in ("megatron", "torch"):
        plan = _plan(framework, overlap=False)
        ops = forward_ops(plan, layer_shape(get_model("llama3-8b"), plan), 0)
        assert all(op.split == 1 for op in ops)
        assert all(not op.concurrent for op in ops if op.lane == "comm.tp")


@pytest.mark.parametrize("framework", ["megatron", "torch"])
def test_task_takes_the_pipeline_formula_of_the_decomposed_matmul(framework: str) -> None:
    """A compute task of one overlapped pair lasts max(M', C + M'/n), M' the decomposed matmul's
    price; without overlap the matmul's price is the whole GEMM's, unchanged."""
    cluster = get_cluster("dgx-h100", nodes=1)
    coster = TaskCoster(CollectiveModel(cluster), Placement(sizes={"tp": 8}), dtype="bf16", gpus_per_node=8)
    plan = _plan(framework)
    shape = layer_shape(get_model("llama3-8b"), plan)
    mms, comm = _pairs(forward_ops(plan, shape, 0))[0]  # the attention input's all-gather
    c = coster.op_duration(comm, 0)
    m_dec = sum(coster.op_duration(mm, 0) for mm in mms)
    for mm in mms:
        chunk = GemmShape(mm.m, mm.n, mm.k, mm.batch)
        expected = decomposed_gemm_s(cluster.device, chunk, "bf16", mm.split, mm.split_streams) * coster.compute_pace
        assert coster.op_duration(mm, 0) == pytest.approx(expected + coster.tp_extra_s)
    task = Task(rank=0, lane=Lane.COMPUTE, kind=Kind.FWD, name="pair", ops=(*mms, comm))
    assert coster.layout(task).duration_s == pytest.approx(max(m_dec, c + m_dec / comm.chunks))
    mm = mms[-1]
    (rs_mm,), rs = _pairs(forward_ops(plan, shape, 0))[1]  # the attention output's reduce-scatter
    m_rs, c_rs = coster.op_duration(rs_mm, 0), coster.op_duration(rs, 0)
    rs_task = Task(rank=0, lane=Lane.COMPUTE, kind=Kind.FWD, name="pair", ops=(rs_mm, rs))
    last = c_rs / rs.chunks if framework == "megatron" else 0.0  # TE sends every chunk, torch keeps its own
    assert coster.layout(rs_task).duration_s == pytest.approx(max(m_rs + last, c_rs + m_rs / rs.chunks))
    whole = next(op for op in forward_ops(_plan(framework, overlap=False), shape, 0) if op.name == mm.name)
    assert (whole.m, whole.split) == (mm.m * 8, 1)
    assert coster.op_duration(whole, 0) == pytest.approx(
        (cluster.device.kernel_overhead_s + gemm_time_s(cluster.device, GemmShape(whole.m, whole.n, whole.k), "bf16"))
        * coster.compute_pace + coster.tp_extra_s)
    assert dataclasses.replace(mm, split=1).split == 1


def test_interference_slows_the_shape_the_chunks_fill() -> None:
    """Beside a DP collective's CTAs, co-running chunks lose SMs as the batched shape they are
    priced as; chunks on one stream each as its own shape."""
    from sim.interference import op_slowdown
    from topo.interference import gemm_slowdown

    chunk = dict(m=640, n=3072, k=8192)
    together = Op(Lane.COMPUTE, Kind.FWD, "mm", OpClass.GEMM, flops=1.0, split=8, split_streams=2, **chunk)
    serial = dataclasses.replace(together, split_streams=1)
    assert op_slowdown(H100, together, "bf16", 16, 0.0) == pytest.approx(
        gemm_slowdown(H100, GemmShape(640, 3072, 8192, 8), "bf16", 16))
    assert op_slowdown(H100, serial, "bf16", 16, 0.0) == pytest.approx(
        gemm_slowdown(H100, GemmShape(640, 3072, 8192), "bf16", 16))
    assert op_slowdown(H100, together, "bf16", 16, 0.0) != op_slowdown(H100, serial, "bf16", 16, 0.0)
