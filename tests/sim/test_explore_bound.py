"""The step-time lower bound (sim/explore/bound.py) and the sweep that skips plans by it
(sim/explore/bound_prune.py): the bound never exceeds the evaluated step, and a sweep that skips
plans ranks exactly as the sweep that times every plan."""

import pytest

from sim.explore.backends import InProcess
from sim.explore.bound_prune import threshold_s
from sim.explore.evaluate import Evaluator
from sim.explore.pruning import BOUND_REASON
from sim.explore.rank import best_per_design, pareto_front, to_verify
from sim.explore.spec import SearchSpace, SweepSpec
from sim.explore.sweep import plan_sweep, run_sweep

EVERY_SCHEDULE = SearchSpace(schedules=("gpipe", "1f1b", "zb-h1", "interleaved", "interleaved-megatron", "interleaved-zb",
                                        "zbv", "dualpipev"),
                             microbatch_sizes=(1, 2), zero=(0, 1, 3), recompute=("none", "full"))


def _bounds_and_steps(spec: SweepSpec, stride: int = 1) -> list[tuple[str, float, float]]:
    plan = plan_sweep(spec)
    evaluator = Evaluator()
    out = []
    for c, cluster in plan.members[::stride]:
        bound = evaluator.bound(plan.model, c, cluster)
        step = evaluator.evaluate_one(plan.model, spec.tokens, c, cluster)["step_time_s"]
        out.append((c.plan_id, bound, step))
    return out


@pytest.mark.slow  # 30-80 s each: every plan of a sweep timed; test_resuming_a_pruned_sweep keeps the path fast
@pytest.mark.parametrize(("model", "clusters", "gpus", "batch"), [
    ("small", ("dgx-h100",), (16,), 32),  # latency-bound: communication is most of the step
    ("gpt3-1.7b", ("dgx-a100", "hgx-h200"), (32,), 64),  # compute-bound, interference on
])
def test_bound_never_exceeds_the_evaluated_step(model, clusters, gpus, batch):
    spec = SweepSpec(model=model, tokens=1e9, global_batch=batch, clusters=clusters, gpus=gpus, space=EVERY_SCHEDULE)
    found = _bounds_and_steps(spec)
    assert len({pid.split("/")[2].split(".")[4] for pid, _, _ in found}) >= 5  # most schedules are in the sweep
    over = [(pid, b, s) for pid, b, s in found if b > s * (1 + 1e-12)]
    assert not over
    assert all(b > 0 for _, b, _ in found)
    if model == "gpt3-1.7b":  # compute-bound: the bound is close (the pipeline fill and drain are in it)
        ratios = sorted(b / s for _, b, s in found)
        assert ratios[len(ratios) // 2] > 0.75


@pytest.mark.slow
def test_bound_never_exceeds_the_evaluated_step_of_moe_plans():
    # Mixtral 8x7B: MoE blocks (all-to-alls inside them); under DualPipeV the all-to-alls of
    # paired blocks overlap other micro-batches' compute (the bound counts their blocks without them).
    space = SearchSpace(schedules=("1f1b", "interleaved", "zb-h1", "dualpipev"), microbatch_sizes=(1,), zero=(1, 3),
                        recompute=("none", "full"))
    spec = SweepSpec(model="mixtral-8x7b", tokens=1e9, global_batch=64, clusters=("dgx-h100",), gpus=(64,),
                     space=space)
    found = _bounds_and_steps(spec, stride=7)
    assert len(found) > 50 and sum(".dualpipev." in pid for pid, _, _ in found) > 5
    assert not [(pid, b, s) for pid, b, s in found if b > s * (1 + 1e-12)]
    assert all(b > 0 for _, b, _ in found)
    assert sorted(b / s for _, b, s in found)[len(found) // 2] > 0.75


@pytest.mark.slow
@pytest.mark.parametrize(("model", "cluster", "gpus", "dtype"), [
    ("gpt3-1.7b", "pcie-4090", 32, "bf16"),  # PCIe, no NVSwitch
    ("llama3-8b", "dgx-b200", 64, "fp8"),
])
def test_bound_holds_across_plan_dimensions(model, cluster, gpus, dtype):
    # Context parallelism, uneven stages, selective recomputation, SP off, fp8: a sample of ~60 plans.
    space = SearchSpace(cp=(1, 2), schedules=("1f1b", "interleaved", "zb-h1", "zbv", "gpipe"), microbatch_sizes=(1, 2),
                        zero=(0, 1, 3), recompute=("none", "full", "selective"), uneven_stages=True, dtype=dtype,
                        sequence_parallel=(True, False))
    spec = SweepSpec(model=model, tokens=1e9, global_batch=64, clusters=(cluster,), gpus=(gpus,), space=space)
    found = _bounds_and_steps(spec, stride=max(1, len(plan_sweep(spec).members) // 60))
    assert len(found) >= 50
    assert not [(pid, b, s) for pid, b, s in found if b > s * (1 + 1e-12)]
    assert {pid.split("/")[2].split(".")[1] for pid, _, _ in found} == {"cp1", "cp2"}


def test_threshold_is_the_keep_th_fastest_with_margin():
    assert threshold_s([3.0, 1.0, 2.0], 2) == pytest.approx(2.0 * (1 + 1e-6))
    assert threshold_s([3.0], 2) == float("inf")


@pytest.mark.slow
@pytest.mark.parametrize("keep", [1, 3])
def test_skipping_plans_by_the_bound_ranks_as_timing_every_plan(tmp_path, keep):
    space = SearchSpace(schedules=("1f1b", "interleaved", "zb-h1"), microbatch_sizes=(1, 2), zero=(1, 3),
                        recompute=("none", "full"))
    spec = SweepSpec(model="gpt3-1.7b", tokens=1e9, global_batch=64, clusters=("dgx-a100", "dgx-h100"),
                     gpus=(16, 32), space=space)
    full = run_sweep(spec, tmp_path / "full", InProcess())
    pruned = run_sweep(spec, tmp_path / "pruned", InProcess(), keep=keep)
    by_id = {r["id"]: r for r in full.rows}
    assert all(by_id[r["id"]] == r for r in pruned.rows)  # the rows it has are the full sweep's rows
    skipped = pruned.plan.pruned_total[BOUND_REASON]
    assert skipped > len(full.rows) // 2 and len(pruned.rows) + skipped == len(full.rows)
    assert pruned.evaluated == len(pruned.rows)
    assert best_per_design(pruned.rows, keep) == best_per_design(full.rows, keep)
    assert pareto_front(pruned.rows) == pareto_front(full.rows)
    assert to_verify(pruned.rows, keep) == to_verify(full.rows, keep)
    for key, counts in pruned.plan.pruned.items():
        assert counts["evaluated"] == sum(1 for r in pruned.rows if f"{r['design']}/{r['gpus']}" == key)


def test_resuming_a_pruned_sweep_times_nothing_more(tmp_path):
    space = SearchSpace(schedules=("1f1b", "zb-h1"), microbatch_sizes=(1, 2), zero=(1,), recompute=("none", "full"))
    spec = SweepSpec(model="small", tokens=1e9, global_batch=32, clusters=("dgx-h100",), gpus=(16,), space=space)
    first = run_sweep(spec, tmp_path / "s", InProcess(), keep=2)
    again = run_sweep(None, tmp_path / "s", InProcess(), resume=True, keep=2)
    assert again.evaluated == 0 and again.resumed == len(first.rows)
    assert again.rows == first.rows
    assert again.plan.pruned == first.plan.pruned
