"""Which FSDP units free their parameters after forward, so that the backward gathers them again
(framework="torch", ZeRO-3, ``plan.fsdp_reshard_after_forward``):

- FSDP keeps the root's: FSDP2 ``FSDPState._lazy_init`` sets the root's ``post_forward_mesh_info``
  to None ("For the root, do not reshard after forward since for training, the parameters would
  be freed and all-gathered immediately", torch/distributed/_composable/fsdp/_fsdp_state.py
  @005da465); FSDP1 ``_post_forward_reshard`` frees only ``not state._is_root``.
- torchtitan also keeps the last block's without PP and every unit's with PP (``apply_fsdp``,
  parallelisms/parallelize_llama.py@9dec370).
- The included trainer passes ``reshard_after_forward=True`` to every unit, which torch 2.13
  applies to the root too (its traces: 10 all-gathers per step for 4 blocks + the root).
"""

from __future__ import annotations

from collections import Counter

import pytest

from profiler.validate.job import plan_for_run
from schedules.builder import BuildOptions, build_task_graph
from schedules.frameworks import get_framework
from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan

LAYERS = 4  # the tiny model's blocks
ROOT = -1


def _gathers(pp: int = 1, microbatches: int = 1, **fields: object) -> Counter:
    """All-gathers per FSDP unit (layer; -1 the root) of rank 0's step (pipeline rank 0 and, with
    PP, the last pipeline rank together)."""
    plan = ParallelPlan(framework="torch", dtype="fp32", dp=2, pp=pp, zero=3, global_batch=2 * microbatches,
                        **fields)  # type: ignore[arg-type]
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)

    def rank_of(tp: int, cp: int, dp: int, pp_rank: int) -> int:
        return dp + plan.dp * pp_rank

    graph = build_task_graph(get_model("tiny"), plan, schedule, rank_of, BuildOptions(folded=False))
    ranks = {0, rank_of(0, 0, 0, pp - 1)}
    return Counter(t.layer for t in graph.tasks if t.rank in ranks and t.lane == "comm.dp" and t.kind == "all_gather")


def test_every_unit_gathered_again_when_all_reshard() -> None:
    assert _gathers(fsdp_reshard_after_forward="all") == {u: 2 for u in (ROOT, *range(LAYERS))}


def test_fsdp_keeps_the_root_for_the_backward() -> None:
    assert _gathers(fsdp_reshard_after_forward="non-root") == {ROOT: 1, **{u: 2 for u in range(LAYERS)}}


def test_torchtitan_keeps_the_last_block_too() -> None:
    expected = {ROOT: 1, LAYERS - 1: 1, **{u: 2 for u in range(LAYERS - 1)}}
    assert _gathers(fsdp_reshard_after_forward="torchtitan") == expected


@pytest.mark.parametrize("microbatches", [1, 4])
def test_torchtitan_with_pp_gathers_each_unit_once(microbatches: int) -> None:
    # with PP no unit reshards after forward; under pipelining none reshards after a backward
    # but the last, so one gather per unit per step, whatever the micro-batch count
    counts = _gathers(pp=2, microbatches=microbatches, fsdp_reshard_after_forward="torchtitan")
    assert counts == {ROOT: 2, **{u: 1 for u in range(LAYERS)}}  # each stage module is a root
    assert _gathers(pp=2, microbatches=microbatches, fsdp_reshard_after_forward="all")[0] >= 2  # the trainer's


def test_presets_and_the_trainer() -> None:
    assert get_framework("torchtitan").value("fsdp_reshard_after_forward") == "torchtitan"
    assert get_framework("fsdp2").value("fsdp_reshard_after_forward") == "non-root"
    assert get_framework("llm-foundry").value("fsdp_reshard_after_forward") == "non-root"  # FSDP1 keeps the root
    config = dict(schedule="1f1b", tp=1, pp=1, dp=4, vpp=1, microbatch_size=1, global_batch=4, zero=3)
    assert plan_for_run(config, "fp32").fsdp_reshard_after_forward == "all"


def test_invalid_choice_names_the_field() -> None:
    with pytest.raises(ValueError, match="fsdp_reshard_after_forward"):
        ParallelPlan(fsdp_reshard_after_forward="root")
