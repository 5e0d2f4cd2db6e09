"""ZeRO-1's gradient reduction as an all-reduce of the whole gradient (``zero1_grad_reduction``):
DeepSpeed's BF16_Optimizer under the pipeline engine.

The fact (DeepSpeed deepspeed/runtime/pipe/engine.py, every version since v0.6): the ReduceGrads
instruction runs ``_bf16_reduce_grads``, "Make our own list of gradients from the optimizer's FP32
grads", ``buffered_allreduce_fallback(grads=self.optimizer.get_grads_for_reduction(), ...)``: an
all-reduce of the flat fp32 gradient buffers, after which each rank updates its partition and the
BF16_Optimizer all-gathers the updated bf16 partitions. Megatron-LM's distributed optimizer
reduce-scatters instead (the default)."""

from __future__ import annotations

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.rows import default_file, read_rows
from schedules.frameworks import get_framework
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from sim.job import Job
from sim.simulate import simulate
from topo.cluster_presets import get_cluster

MODEL = get_model("gpt3-1.7b")


def _plan(**fields: object) -> ParallelPlan:
    return ParallelPlan(**{**get_framework("deepspeed").plan_fields(), "tp": 1, "pp": 1, "dp": 16, "zero": 1,
                           "microbatch_size": 1, "global_batch": 32, "overlap_grad_reduce": False, **fields})


def _dp_spans(plan: ParallelPlan):  # type: ignore[no-untyped-def]
    result = simulate(Job(model=MODEL, plan=plan, cluster=get_cluster("dgx-a100", nodes=2)))
    spans = result.timeline.spans
    dp = spans[(spans["rank"] == 0) & (spans["lane"].astype(str) == "comm.dp")
               & ~spans["name"].astype(str).str.startswith("grad_norm")]  # the norm's one-float all-reduce aside
    return result, dp


def test_the_all_reduce_replaces_the_reduce_scatter_with_the_same_bytes() -> None:
    rs_result, rs = _dp_spans(_plan())
    ar_result, ar = _dp_spans(_plan(zero1_grad_reduction="all-reduce"))
    rs_kinds = set(rs["kind"].astype(str))
    ar_kinds = set(ar["kind"].astype(str))
    assert "reduce_scatter" in rs_kinds and "all_reduce" not in rs_kinds
    assert "all_reduce" in ar_kinds and "reduce_scatter" not in ar_kinds
    assert "all_gather" in rs_kinds and "all_gather" in ar_kinds  # the updated shards are gathered either way

    def grad_bytes(frame, kind):  # type: ignore[no-untyped-def]
        return float(frame[frame["kind"].astype(str) == kind]["bytes"].sum())

    assert grad_bytes(ar, "all_reduce") == pytest.approx(grad_bytes(rs, "reduce_scatter"), rel=1e-12)
    # a ring all-reduce is a reduce-scatter then an all-gather: about twice the time on the same bytes
    rs_s = float((rs["end_s"] - rs["start_s"])[rs["kind"].astype(str) == "reduce_scatter"].sum())
    ar_s = float((ar["end_s"] - ar["start_s"])[ar["kind"].astype(str) == "all_reduce"].sum())
    assert 1.5 * rs_s < ar_s < 2.5 * rs_s
    assert ar_result.metrics.step_time_s > rs_result.metrics.step_time_s


@pytest.mark.parametrize(("fields", "needle"), [
    ({"zero": 0}, "zero=0"),
    ({"zero": 2}, "zero=2"),
    ({"offload": "optimizer"}, "offload=optimizer"),
])
def test_the_all_reduce_is_refused_outside_zero1_on_the_megatron_runtime(fields: dict[str, object],
                                                                        needle: str) -> None:
    with pytest.raises(ValueError, match="zero1_grad_reduction") as err:
        _plan(zero1_grad_reduction="all-reduce", **fields)
    assert needle in str(err.value)


def test_a_torch_runtime_plan_refuses_it() -> None:
    with pytest.raises(ValueError, match="zero1_grad_reduction"):
        ParallelPlan(framework="torch", zero=1, dp=2, zero1_grad_reduction="all-reduce")


def test_the_bloom_row_runs_deepspeeds_bf16_optimizer_all_reduce() -> None:
    row = next(r for r in read_rows(default_file()) if r.name.startswith("bloom-176b"))
    plan = job_for_row(row).job.plan
    assert plan.zero == 1 and plan.all_reduces_grads and plan.grad_reduce_dtype == "fp32"
