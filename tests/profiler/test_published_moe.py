"""Published MoE rows (docs/published-moe-runs.toml): every row maps onto an expert-parallel job
of its MoE preset, derived step times follow from the published throughput, and a row whose
dimensions are not its preset's is refused with a one-line reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.notes import Unexpressible
from profiler.validate.published.rows import PublishedRow, read_rows
from schedules.moe_presets import get_moe_model

FILE = Path(__file__).resolve().parents[2] / "docs" / "published-moe-runs.toml"


def test_every_row_is_an_expert_parallel_job_of_its_preset():
    rows = read_rows(FILE)
    assert len(rows) >= 7
    for row in rows:
        assert row.moe_model and row.source and "@" in row.source  # a commit for every source
        rj = job_for_row(row)
        preset = get_moe_model(row.moe_model)
        moe = rj.job.model.moe
        assert moe is not None and preset.moe is not None
        assert dataclasses.replace(moe, routing="uniform") == preset.moe  # routing: by the row's notes
        assert rj.job.model.num_layers == preset.num_layers
        assert rj.job.plan.ep == row.ep and rj.job.plan.moe_imbalance == 1.0
        assert rj.job.plan.world_size == row.gpus


def test_derived_step_times_follow_from_the_published_throughput():
    for row in read_rows(FILE):
        if row.step_basis == "derived":
            assert row.measured_tokens_per_s_per_gpu is not None and row.global_batch is not None
            expected = row.global_batch * row.seq_len / (row.measured_tokens_per_s_per_gpu * row.gpus)
            assert row.measured_step_s == pytest.approx(expected, rel=1e-4)


def test_a_row_unlike_its_preset_is_refused():
    row = dataclasses.replace(read_rows(FILE)[0], layers=35)
    with pytest.raises(Unexpressible, match="^layers 35 differs from the gpt-oss-120b preset's 36$"):
        job_for_row(row)


def test_an_unknown_preset_is_refused():
    row = dataclasses.replace(read_rows(FILE)[0], moe_model="grok-1")
    with pytest.raises(Unexpressible, match="unknown MoE model 'grok-1'"):
        job_for_row(row)


def _rows_by_name() -> dict[str, PublishedRow]:
    return {row.name: row for row in read_rows(FILE)}


def test_megatron_bridge_gpt_oss_rows_run_their_recipe():
    """The recipes at the release tags (v0.2.0 for 25.11, v0.3.0 for 26.02): bf16 gradient
    reduction, recompute_modules [layernorm, moe_act] (selective_recompute "layernorm-moe-act"),
    EP 64 at MBS 4 on B200 and MBS 1 on H100 (the 25.11 table's EP 8 and
    MBS 4 are not the recipe's)."""
    rows = _rows_by_name()
    for name, ep, mbs in (("mbridge-2511-b200x64-gpt-oss-120b-bf16", 64, 4),
                          ("mbridge-2511-h100x64-gpt-oss-120b-bf16", 8, 1),
                          ("mbridge-2602-b200x64-gpt-oss-120b-bf16", 64, 4),
                          ("mbridge-2602-h100x64-gpt-oss-120b-bf16", 8, 1)):
        rj = job_for_row(rows[name])
        plan = rj.job.plan
        assert (plan.ep, plan.microbatch_size, plan.grad_reduce_dtype) == (ep, mbs, "compute")
        assert (plan.recompute, plan.selective_recompute) == ("selective", "layernorm-moe-act")
    automodel = job_for_row(rows["automodel-h100x64-gpt-oss-120b-bf16"])
    assert automodel.job.plan.grad_reduce_dtype != "compute"  # the recipe is Megatron-Bridge's only


def test_automodel_rows_route_round_robin_as_their_fake_balanced_gate_does():
    """AutoModel's table: 'Fake balanced gate is enabled' (nemo_automodel FakeBalancedGate);
    Megatron-Bridge forces balance with random logits (uniform routing)."""
    for row in read_rows(FILE):
        moe = job_for_row(row).job.model.moe
        assert moe is not None
        assert moe.routing == ("round-robin" if row.framework.startswith("NeMo AutoModel") else "uniform")


def test_an_moe_row_with_tp_and_no_stated_sp_or_etp_runs_with_megatrons_defaults():
    """Megatron-Core's MoE layers need sequence parallelism under TP: a row that leaves it unstated
    gets it, as `trainsim simulate` does (MoELayers.tp_plan_defaults), instead of being refused
    (a Megatron-Bridge row takes it from the nemo preset already)."""
    base = _rows_by_name()["mbridge-2511-h100x64-gpt-oss-120b-bf16"]  # TP1 PP4 DP16 EP8
    row = dataclasses.replace(base, tp=2, dp=8, grad_accum=base.grad_accum and 2 * base.grad_accum,
                              sequence_parallel=None, framework="Megatron-LM / Megatron-Core r0.8.0")
    rj = job_for_row(row)
    assert rj.job.plan.sequence_parallel and rj.job.plan.tp == 2
    assert [n.text for n in rj.assumed if n.code == "sp"] == [
        "sequence parallelism not stated: on, as MoE layers need it with TP"]
    # and the experts are TP-sharded as Megatron-Core's --expert-tensor-parallel-size defaults (to TP)
    assert rj.job.plan.etp == 2
    assert [n.text for n in rj.assumed if n.code == "etp"] == [
        "expert tensor parallelism not stated: etp 2, Megatron-Core's default (TP)"]
    assert job_for_row(dataclasses.replace(row, etp=1)).job.plan.etp == 1
