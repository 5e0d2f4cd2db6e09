"""framework="torch": the task graph does what the included trainer does.

Ground truth: torch 2.13's ``Schedule1F1B``/``ScheduleGPipe`` wait points (read off
``torch/distributed/pipelining/schedules.py``) and the collective counts of the committed
trainer traces (FSDP2 ZeRO-3 on 4 ranks, 1 micro-batch: 10 all-gathers and 5 reduce-scatters
per step per rank for 4 blocks + the root unit).
"""

from __future__ import annotations

from collections import Counter

import pytest

from schedules.builder import BuildOptions, build_task_graph
from schedules.model_presets import get_model
from schedules.passes.p2p_torch import END, send_wait_index
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan


def _graph(**plan_fields):  # type: ignore[no-untyped-def]
    # the trainer: a one-stage pipeline without PP too, reducing after the last backward
    plan = ParallelPlan(framework="torch", dtype="fp32", overlap_grad_reduce=False, **plan_fields)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    sizes = {"tp": plan.tp, "cp": 1, "dp": plan.dp, "pp": plan.pp}

    def rank_of(tp: int, cp: int, dp: int, pp: int) -> int:
        return tp + sizes["tp"] * (dp + sizes["dp"] * pp)

    return build_task_graph(get_model("tiny"), plan, schedule, rank_of, BuildOptions(folded=False)), schedule


def test_1f1b_send_waits_follow_torch() -> None:
    # stage 0 of 2, 4 micro-batches: F0 F1 B0 F2 B1 F3 B2 B3
    _, schedule = _graph(pp=2, global_batch=4, schedule="1f1b")
    order = schedule.orders[0]
    assert [str(a) for a in order] == ["0F0", "0F1", "0B0", "0F2", "0B1", "0F3", "0B2", "0B3"]
    # F0's send is waited after F1 computes (warm-up), F1's with B0's receive, steady-state F with
    # the next B's receive
    assert [send_wait_index("1f1b", order, i) for i in (0, 1, 3, 5)] == [2, 2, 4, 6]
    last = schedule.orders[1]  # last stage: F0 B0 F1 B1 ...; B sends fused with the next F's recv
    assert send_wait_index("1f1b", last, 1) == 2
    assert send_wait_index("1f1b", last, len(last) - 1) == END


def test_gpipe_send_waits_follow_torch() -> None:
    _, schedule = _graph(pp=2, global_batch=4, schedule="gpipe")
    order = schedule.orders[0]
    first_backward = next(i for i, a in enumerate(order) if a.phase == "B")
    assert all(send_wait_index("gpipe", order, i) == first_backward for i in range(first_backward))
    assert send_wait_index("gpipe", schedule.orders[1], first_backward + 1) == END


def test_runtime_schedules_wait_at_the_end() -> None:
    _, schedule = _graph(pp=2, vpp=2, global_batch=4, schedule="interleaved")
    assert {send_wait_index("interleaved", schedule.orders[0], i) for i in range(4)} == {END}


def test_sends_meet_their_receives() -> None:
    graph, _ = _graph(pp=2, global_batch=4, schedule="1f1b")
    groups = Counter((t.group, t.kind) for t in graph.tasks if t.lane == "comm.pp")
    pairs = {g for g, _ in groups}
    assert pairs and all(groups[(g, "send")] == 1 and groups[(g, "recv")] == 1 for g in pairs)
    assert len(pairs) == 2 * 4  # activations and gradients of 4 micro-batches


def _dp_counts(zero: int, microbatches: int) -> Counter:
    graph, _ = _graph(dp=4, zero=zero, global_batch=4 * microbatches)
    return Counter(t.kind for t in graph.tasks if t.rank == 0 and t.lane == "comm.dp")


def test_zero3_counts_match_the_recorded_fsdp2_trace() -> None:
    counts = _dp_counts(zero=3, microbatches=1)
    assert counts == {"all_gather": 10, "reduce_scatter": 5}


@pytest.mark.parametrize("microbatches", [1, 2, 4])
def test_fsdp2_gathers_per_unit(microbatches: int) -> None:
    units = 5  # 4 blocks + root (embedding, final norm, head)
    # ZeRO-3: forward of the first micro-batch + every backward (a non-last backward leaves the
    # parameters unsharded for the next forward, which reshards them after)
    assert _dp_counts(3, microbatches)["all_gather"] == units * (1 + microbatches)
    assert _dp_counts(2, microbatches)["all_gather"] == units  # ZeRO-2: once per step
    assert _dp_counts(2, microbatches)["reduce_scatter"] == units
    assert _dp_counts(0, microbatches) == {"all_reduce": units}
    assert _dp_counts(1, microbatches) == {"all_reduce": units, "broadcast": 4}


@pytest.mark.parametrize(("zero", "fresh_per_unit"), [(0, 2), (1, 2), (2, 1), (3, 1)])
def test_fresh_buffers_of_the_fsdp2_copies(zero: int, fresh_per_unit: int) -> None:
    """First-touch bytes per step (op class "alloc"), as the torch 2.13 traces show the copies:
    replicate's post-backward writes two new unit-sized buffers (chunk_cat, copy_), fully_shard's
    one; every all-gather writes its shard into a new buffer (copy-in) and the collective fills
    the rest of that buffer; the copy-out into the unsharded parameters runs at streaming speed
    in the traces (their storage comes back at the same size after each reshard)."""
    from schedules.stages import plan_stages

    dp = 4
    graph, _ = _graph(dp=dp, zero=zero, global_batch=dp * 2)
    params = plan_stages(get_model("tiny"), ParallelPlan(framework="torch", dtype="fp32", dp=dp, zero=zero,
                                                         global_batch=dp * 2))[0].params_local
    fresh = Counter()
    for t in graph.tasks:
        if t.rank == 0:
            for op in t.ops:
                if op.op_class == "alloc":
                    fresh[op.name.rsplit(".", 2)[-2]] += op.bytes
    assert fresh["post_backward"] == pytest.approx(fresh_per_unit * 4 * params)
    gathers = sum(1 for t in graph.tasks if t.rank == 0 and t.kind == "all_gather") / 5  # per unit
    assert fresh["param_copy_in"] == pytest.approx(gathers * 4 * params / dp)
    assert fresh["param_copy"] == 0  # the unsharded storage comes back at the same size
    assert fresh["param_ag"] == pytest.approx(gathers * 4 * params * (dp - 1) / dp)  # the other shards


def test_measured_post_backward_copies_match_the_model() -> None:
    """dp2-zero0-wide (replicate) traces: chunk_cat + copy_ of one block's 11.8 MB of gradients
    took ~20 ms, 4x what streaming alone gives; the modelled copy with its first touch at the
    profile's measured rate is within 30% of it."""
    from pathlib import Path

    import pandas as pd

    from profiler.validate.job import job_for_run
    from profiler.validate.measured import load_measured
    from sim.simulate import build_and_price
    from topo.hardware_profile import load_profile

    root = Path(__file__).resolve().parents[2]
    run = load_measured(root / "traces" / "suite-dp2-zero0-wide")
    spans = pd.concat([r.timeline.spans for r in run.recordings])
    post = spans[(spans["microbatch"] == -1) & (spans["kind"].astype(str) == "bwd")
                 & spans["name"].astype(str).isin(["fsdp::chunk_cat", "aten::copy_"])]
    big = post[(post["end_s"] - post["start_s"]) > 2e-3]  # the blocks' copies, not the root's
    measured = float((big["end_s"] - big["start_s"]).median() * 2)  # chunk_cat and copy_ alike
    job = job_for_run(run.manifest, profile=load_profile(root / "profiles" / "this-host.toml"), speed=1.0, steps=1)
    _, _, graph, costs = build_and_price(job)
    simulated = [c.duration_s for t, c in zip(graph.tasks, costs, strict=True) if t.name == "L0.post_backward"]
    assert simulated and simulated[0] == pytest.approx(measured, rel=0.3)


def test_zero1_broadcasts_flatten_and_copy_back() -> None:
    """profiler/trainer/zero1.py: per DP rank, every rank concatenates that owner's parameters
    into a new buffer (copy + first touch), broadcasts it and copies it back."""
    from schedules.stages import plan_stages

    dp = 4
    graph, _ = _graph(dp=dp, zero=1, global_batch=dp)
    shard = 4 * plan_stages(get_model("tiny"), ParallelPlan(framework="torch", dtype="fp32", dp=dp, zero=1,
                                                            global_batch=dp))[0].params_local / dp
    mine = [t for t in graph.tasks if t.rank == 0 and t.kind in ("optimizer", "broadcast")]
    names = [t.name.split(" dp")[0] for t in mine]
    assert names == ["optimizer"] + ["param_flatten", "param_bcast from", "param_unflatten"] * dp
    for t in mine:
        if t.name.startswith("param_flatten"):
            assert [op.bytes for op in t.ops] == [pytest.approx(2 * shard), pytest.approx(shard)]


@pytest.mark.parametrize("gloo_host", [True, False])
def test_gloo_reduce_scatter_clones_its_input(gloo_host: bool) -> None:
    """ProcessGroupGloo runs reduce_scatter as an all-reduce on a new copy of the input: on a CPU
    host that copy's pages are touched first (the committed dp2-zero3 traces show the
    ``c10d::_reduce_scatter_base_`` call taking ~9 ms per 11.8 MB block before gloo starts)."""
    plan = ParallelPlan(framework="torch", dtype="fp32", dp=2, zero=3, global_batch=2)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(get_model("tiny"), plan, schedule, lambda tp, cp, dp, pp: dp,
                             BuildOptions(folded=False, gloo_host=gloo_host))
    for task in graph.tasks:
        if task.kind == "reduce_scatter":
            clones = [op for op in task.ops if op.op_class == "alloc"]
            collective = [op for op in task.ops if op.op_class == "reduce_scatter"]
            assert len(collective) == 1
            assert [op.bytes for op in clones] == ([collective[0].bytes] if gloo_host else [])
