"""The checkpoint's device-to-host snapshot as a task on the simulated timeline (issue 27): its place
in the graph, its price against the formula, its blocking part, and contention in flow mode."""

import dataclasses

import pytest

from core.vocab import Kind, Lane
from sim.job import DEFAULT_JOB, resolve_job
from sim.pricing import cost_graph
from sim.run.checkpoint import checkpoint_cost
from sim.run.inputs import CheckpointMode, StorageSpec
from sim.run.snapshot import SNAPSHOT_NAME, snapshot_timing, with_snapshots
from sim.simulate import Priced, build_priced, engine_name, timed

SMALL = {"model": "small", "cluster": "dgx-h100", "nodes": 2, "tp": 1, "pp": 2, "global_batch": 64}


def _job(**kw):
    return resolve_job({**SMALL, **kw}, defaults=DEFAULT_JOB)


def _timed_with_snapshots(job, size=1e8):
    two = dataclasses.replace(job, steps=2)
    p = build_priced(two)
    graph, snaps = with_snapshots(p.graph, {t.rank: size for t in p.graph.tasks})
    start, end = timed(two, Priced(p.schedule, p.placement, graph, cost_graph(graph, p.coster), p.coster),
                       engine_name(two))
    return graph, snaps, start, end


@pytest.mark.parametrize("offload", ["none", "optimizer"])
def test_snapshot_follows_the_update_and_holds_the_next_step(offload):
    job = _job(zero=2 if offload != "none" else 1, offload=offload)
    graph, snaps, start, end = _timed_with_snapshots(job)
    ranks = {t.rank for t in graph.tasks}
    assert len(snaps) == len(ranks) and all(graph.tasks[s].name == SNAPSHOT_NAME for s in snaps)
    for s in snaps:
        r = graph.tasks[s].rank
        assert graph.tasks[s].lane == Lane.MEMCPY
        mine = [i for i, t in enumerate(graph.tasks) if t.rank == r and i != s]
        updates = [i for i in mine if graph.tasks[i].step == 0 and graph.tasks[i].kind == Kind.OPTIMIZER]
        copies = [i for i in mine if graph.tasks[i].step == 0 and graph.tasks[i].lane == Lane.MEMCPY]
        assert start[s] >= max(end[i] for i in updates + copies) - 1e-12
        step1 = [i for i in mine if graph.tasks[i].step == 1 and graph.tasks[i].lane == Lane.COMPUTE]
        assert min(start[i] for i in step1) >= end[s] - 1e-12


def test_analytic_snapshot_is_the_formulas_copy_and_blocks_at_most_that():
    job = _job()
    rank_bytes = 3e8
    timing = snapshot_timing(job, {}, rank_bytes)
    formula = checkpoint_cost(job, rank_bytes, StorageSpec(), CheckpointMode.ASYNC).d2h_formula_s
    assert timing.copy_s == pytest.approx(formula, rel=1e-9)
    assert 0 < timing.blocking_s <= timing.copy_s + 1e-12
    cost = checkpoint_cost(job, rank_bytes, StorageSpec(), CheckpointMode.SYNC, timing)
    assert cost.d2h_blocking_s == timing.blocking_s and cost.blocking_s == pytest.approx(timing.blocking_s + cost.write_s)
    assert checkpoint_cost(job, rank_bytes, StorageSpec(), CheckpointMode.ASYNC, timing).blocking_s == timing.blocking_s


def test_flow_model_slows_the_snapshot_beside_dp_traffic():
    """Llama 3 8B, TP8 on each of 2 nodes, ZeRO-1 with the parameter all-gather prefetched: the
    all-gather crosses the nodes through the NICs (GPUDirect, the GPU's PCIe link) while the
    snapshot goes up the same link, so in flow mode the copy takes longer than alone."""
    plan = {"model": "llama3-8b", "tp": 8, "pp": 1, "global_batch": 16, "zero": 1, "overlap_param_gather": True}
    alone = snapshot_timing(_job(**plan), {}, 1e9)
    shared = snapshot_timing(_job(**plan, fidelity="flow"), {}, 1e9)
    assert shared.two_steps_s == pytest.approx(alone.two_steps_s, rel=1e-9)  # same steps without it
    assert shared.copy_s > 1.1 * alone.copy_s and shared.blocking_s > alone.blocking_s


def test_run_object_reports_the_simulated_snapshot(capsys, tmp_path, monkeypatch):
    import json

    from sim.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--model", "small", "--cluster", "dgx-h100", "--nodes", "2", "--tp", "2", "--pp", "2",
                 "--global-batch", "16", "--no-report", "--json", "--tokens", "1e9", "--reliability", "meta-rsc1"]) == 0
    ckpt = json.loads(capsys.readouterr().out)["run"]["checkpoint"]
    assert ckpt["d2h_s"] == pytest.approx(ckpt["d2h_formula_s"], rel=1e-6)  # analytic: the same price
    assert 0 < ckpt["d2h_blocking_s"] <= ckpt["d2h_s"]
    assert ckpt["blocking_s"] == pytest.approx(ckpt["d2h_blocking_s"] + ckpt["write_s"], rel=1e-6)  # sync


def test_report_draws_the_snapshot_on_the_copy_stream():
    from sim.run.predict import predict_run
    from sim.run.presets import get_reliability
    from sim.run.report import snapshot_figure
    from sim.simulate import simulate

    run = predict_run(simulate(_job()), get_reliability("meta-rsc1"), 1e9)
    spans = run.snapshot.timeline.spans
    snap = spans[spans["name"] == SNAPSHOT_NAME]
    assert len(snap) == len({t for t in spans["rank"]}) and set(snap["lane"]) == {Lane.MEMCPY}
    start, end = run.snapshot.window_s
    assert start == pytest.approx(float(snap["start_s"].min())) and end == pytest.approx(float(snap["end_s"].max()))
    lo, hi = snapshot_figure(run).layout.xaxis.range
    assert lo < start * 1e3 and hi > end * 1e3
