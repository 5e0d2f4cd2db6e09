"""Megatron-LM's per-micro-batch work outside the model (schedules/microbatch_syncs.py): the last
stage's loss all-reduce over DP (2021 pretrain_gpt.py loss_func; Megatron-Core r0.8.0 l.144-145),
r0.8.0's NaN check host sync (l.136-141), the 2021 timers' device synchronizes (global_vars.py
_Timer.start/stop @fda81a212b)."""

from __future__ import annotations

import dataclasses

import pytest

from core.groups import DP
from core.vocab import Collective, OpClass
from schedules.frameworks import get_framework
from schedules.microbatch_syncs import LOSS_REPORT_BYTES
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from schedules.stages import plan_stages
from schedules.work import ModelWork
from sim.host_sync import PY_LAUNCH_HOST_S
from sim.job import resolve_job
from sim.simulate import simulate


def _work(preset: str) -> tuple[ModelWork, ParallelPlan]:
    plan = ParallelPlan(pp=2, dp=4, global_batch=32, **get_framework(preset).plan_fields())
    return ModelWork(get_model("gpt3-1.7b"), plan, False), plan


def _ops(preset: str, stage: int, phase: str, first: bool, last: bool):  # type: ignore[no-untyped-def]
    work, plan = _work(preset)
    stages = plan_stages(get_model("gpt3-1.7b"), plan)
    return work.block_ops(stages[stage], phase, stages[stage].layers, first, last)


def test_megatron_core_checks_then_all_reduces_the_loss_on_the_last_stage() -> None:
    ops = _ops("megatron-core", 1, "F", True, True)
    assert [op.op_class for op in ops[-2:]] == [OpClass.HOST_SYNC, OpClass(Collective.ALL_REDUCE)]
    assert ops[-1].bytes == LOSS_REPORT_BYTES and ops[-1].dim == DP and not ops[-1].concurrent
    assert not any(op.name.startswith("loss.") for op in _ops("megatron-core", 0, "F", True, True))
    assert not any(op.name.startswith("loss.") for op in _ops("megatron-core", 1, "B", True, True))


@pytest.mark.parametrize(("preset", "syncs"), [("megatron-2021", 0), ("nemo", 0), ("torchtitan", 0)])
def test_other_stacks_run_no_nan_check(preset: str, syncs: int) -> None:
    ops = _ops(preset, 1, "F", True, True)
    assert sum(op.name == "loss.isnan" for op in ops) == syncs


def test_2021_timers_synchronize_at_every_pass_start() -> None:
    for phase in ("F", "B"):
        ops = _ops("megatron-2021", 0, phase, True, False)
        assert ops[0].op_class == OpClass.HOST_SYNC and ops[0].name.endswith("timer_sync")
        assert not any(op.op_class == OpClass.HOST_SYNC for op in _ops("megatron-2021", 0, phase, False, False))
    assert not any(op.name.endswith("timer_sync") for op in _ops("megatron-core", 0, "F", True, False))


def _step_s(**plan: object) -> float:
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 1, "gpus_per_node": 1, "tp": 1, "pp": 1, "dp": 1,
                       "microbatches": 8, "framework_preset": "megatron-2021"})
    return simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, **plan))).metrics.step_time_s


def test_each_timer_synchronize_idles_the_gpu_for_at_least_one_launch() -> None:
    """After a synchronize the GPU waits for the host's next kernel (sim.host_sync): 8 micro-batches,
    a forward and a backward each, cost at least 16 module-issued launches more."""
    assert _step_s(timer_syncs=True) - _step_s(timer_syncs=False) >= 16 * PY_LAUNCH_HOST_S * 0.999


def test_the_loss_all_reduce_runs_once_per_micro_batch_on_the_last_stage() -> None:
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 2, "pp": 2,
                       "microbatches": 4, "framework_preset": "megatron-core"})
    spans = simulate(job).timeline.spans
    loss = spans[spans["name"] == "loss.dp_allreduce"]
    assert len(loss) == 4 * loss["rank"].nunique() and loss["rank"].nunique() >= 1
    assert (loss["stage"] == 1).all()
