"""The megatron runtime's step end (schedules.step_end_syncs): the tied embedding's gradient
all-reduce between the first and last pipeline stage, and the gradient norm's all-reduce and
``.item()`` that every rank's update waits for (Megatron-Core r0.8.0 finalize_model_grads.py
l.13-40, clip_grads.py l.105-118, distrib_optimizer.py l.547-552)."""

from __future__ import annotations

import dataclasses

import pytest

from core.groups import MP, PP_ENDS, WORLD
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from schedules.stages import plan_stages
from schedules.step_end_syncs import embedding_grad_bytes, norm_group
from sim.job import Job
from sim.rank_groups import RankGroups
from sim.simulate import simulate
from topo.cluster_presets import get_cluster
from topo.placement import Placement

GPT = get_model("gpt3-1.7b")  # untied, as the presets are
TIED = dataclasses.replace(GPT, tied_embeddings=True)


def _plan(**fields: object) -> ParallelPlan:
    base: dict[str, object] = dict(tp=2, pp=4, dp=2, global_batch=16, microbatch_size=1, framework="megatron")
    return ParallelPlan(**{**base, **fields})


def _spans(model, plan, folded=True):  # type: ignore[no-untyped-def]
    result = simulate(Job(model=model, plan=plan, cluster=get_cluster("dgx-a100", nodes=2), folded=folded))
    return result, result.timeline.spans


def test_the_embedding_gradient_is_vocab_over_tp_by_hidden_fp32_only_when_tied_and_pipelined() -> None:
    assert embedding_grad_bytes(TIED, _plan()) == 4 * GPT.vocab_size / 2 * GPT.hidden_size
    assert embedding_grad_bytes(GPT, _plan()) == 0  # untied: the head has its own weight
    assert embedding_grad_bytes(TIED, _plan(pp=1, dp=8)) == 0  # one stage holds the one weight


def test_the_norm_spans_the_world_with_a_sharded_optimizer_else_tp_by_pp() -> None:
    assert norm_group(_plan(zero=1)) == WORLD and norm_group(_plan(zero=0)) == MP
    groups = RankGroups(Placement(sizes={"tp": 2, "cp": 1, "dp": 2, "pp": 4}))
    assert groups.group(WORLD, 5) == tuple(range(16))
    assert groups.group(MP, 0) == (0, 1, 4, 5, 8, 9, 12, 13)  # dp 0: every tp and pp rank
    assert groups.group(PP_ENDS, 1) == (1, 13)  # tp 1, dp 0: its pp 0 and pp 3 ranks


def test_every_stage_updates_after_the_last_stage_has_its_norm() -> None:
    _, s = _spans(GPT, _plan(zero=1))
    norm = s[s["name"] == "grad_norm"].groupby("rank")["end_s"].max()
    update = s[s["name"] == "optimizer.step"].groupby("rank")["start_s"].min()
    assert len(norm) == len(update) == 4  # one simulated rank per stage
    assert update.max() - update.min() < 1e-12  # a barrier: all at once
    assert update.min() >= norm.max()  # ... after the slowest stage's norm
    assert norm.max() - norm.min() > 1e-4  # which the stages reach at different times (1F1B's cool-down)
    item = s[s["name"] == "grad_norm.item"]
    assert len(item) == 4 and (item["lane"] == "host").all()


def test_the_tied_embedding_is_reduced_on_the_two_end_stages_and_folding_changes_nothing() -> None:
    plan = _plan(zero=1)
    folded, s = _spans(TIED, plan)
    grads = s[s["name"] == "embedding_grads.allreduce"]
    pp_of = folded.timeline.meta.rank_pp
    assert sorted(pp_of[r] for r in grads["rank"]) == [0, 3]
    assert (grads["bytes"] == embedding_grad_bytes(TIED, plan)).all()
    full, _ = _spans(TIED, plan, folded=False)
    assert full.metrics.step_time_s == pytest.approx(folded.metrics.step_time_s, rel=1e-9)
    untied, _ = _spans(GPT, plan)
    assert folded.metrics.step_time_s > untied.metrics.step_time_s  # the all-reduce crosses nodes


def test_torch_runtime_keeps_its_own_clip() -> None:
    _, s = _spans(GPT, _plan(framework="torch", zero=1))
    assert not s["name"].astype(str).str.startswith(("grad_norm", "embedding_grads")).any()


def test_a_v_shaped_schedule_holds_both_ends_on_one_rank_and_syncs_no_copy() -> None:
    plan = _plan(zero=1, schedule="zbv", vpp=2, global_batch=32)
    assert embedding_grad_bytes(TIED, plan) == 0
    stages = plan_stages(TIED, plan)  # the head reads the embedding's own weight: no second copy
    assert stages[-1].head_params_local == pytest.approx(TIED.head_params() / 2)
    _, s = _spans(TIED, plan)
    assert not (s["name"] == "embedding_grads.allreduce").any()
    assert (s["name"] == "grad_norm.allreduce").sum() == 4  # the norm still meets on every stage
