"""DeepSpeed v0.6.2 ZeRO-3's pre-divide: ``reduce_scatter_coalesced`` runs
``tensor_partition_flat_buffer.div_(world_sz)`` over the whole gradients before the reduce-scatter,
on the reduction stream (deepspeed/runtime/comm/coalesced_collectives.py @v0.6.2 l.97)."""

from __future__ import annotations

from core.vocab import Kind, OpClass
from schedules.builder import BuildOptions, build_task_graph
from schedules.grad_bucket_ops import zero3_predivide
from schedules.model import ModelSpec
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.job import resolve_job
from sim.simulate import simulate

MODEL = ModelSpec(num_layers=2, hidden_size=2048, num_heads=16, vocab_size=50257, seq_len=1024)


def _plan(**extra) -> ParallelPlan:
    fields = dict(dp=8, global_batch=8, zero=3, zero3_unit="module", recompute="full", framework="megatron")
    return ParallelPlan(**{**fields, **extra})


def test_one_read_and_one_write_of_the_gradients_in_their_dtype():
    plan = _plan()
    (op,) = zero3_predivide(plan, "grad_rs L0-0", 1e6)
    assert (op.op_class, op.kind, op.bytes) == (OpClass.ELEMENTWISE, Kind.OTHER, 2 * plan.grad_reduce_bytes * 1e6)


def test_only_deepspeeds_v062_zero3():
    assert zero3_predivide(_plan(zero=2), "g", 1e6) == ()
    assert zero3_predivide(_plan(zero3_unit="block"), "g", 1e6) == ()
    assert zero3_predivide(_plan(average_in_collective=True), "g", 1e6) == ()


def _reductions(plan: ParallelPlan):
    graph = build_task_graph(MODEL, plan, build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp),
                             lambda tp, cp, dp, pp: dp, BuildOptions(folded=True))
    return [t for t in graph.tasks if t.rank == 0 and t.kind == "reduce_scatter"]


def test_every_reduce_scatter_divides_first_and_the_division_holds_no_buffer():
    tasks = _reductions(_plan())
    assert tasks and all(t.ops[0].name.endswith(".div") and t.ops[1].op_class == OpClass.REDUCE_SCATTER
                         and t.ops[0].bytes == 2 * t.ops[1].bytes for t in tasks)
    result = simulate(resolve_job({"layers": 2, "hidden": 2048, "heads": 16, "vocab": 1000, "seq_len": 512,
                                   "cluster": "dgx-a100", "nodes": 1, "dp": 8, "global_batch": 8, "zero": 3,
                                   "zero3_unit": "module", "recompute": "full", "framework": "megatron"}))
    spans = result.timeline.spans
    largest = spans.loc[spans["kind"].astype(str) == "reduce_scatter", "bytes"].max()
    held = max(mt.bytes["comm_buffers"].max() for mt in result.memory_timelines.values())
    assert held < 2 * largest  # the division's 2x bytes are traffic, not a buffer
