"""ZeRO-Offload / ZeRO-Infinity: plan validation, memory formulas (Ren et al. 2021) and the tasks."""

from __future__ import annotations

import dataclasses

import pytest

from schedules.builder import build_task_graph
from schedules.memory import offloaded_state_bytes
from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.stages import plan_stages

PSI = 1e9


def test_optimizer_offload_leaves_2_plus_2_bytes_on_the_gpu_and_moves_12_to_the_host():
    hbm, host = offloaded_state_bytes(PSI, zero_stage=1, shard_ranks=1, offload="optimizer", device="cpu")
    assert (hbm.params, hbm.grads, hbm.optimizer) == (2 * PSI, 2 * PSI, 0.0)
    assert host.dram == 12 * PSI + 2 * PSI and host.nvme == 0.0  # fp32 states + bf16 grad shard


@pytest.mark.parametrize("zero,grads", [(1, 2 * PSI), (2, 2 * PSI / 8), (3, 2 * PSI / 8)])
def test_offload_keeps_zero_sharding_of_grads_and_shards_host_states(zero, grads):
    hbm, host = offloaded_state_bytes(PSI, zero_stage=zero, shard_ranks=8, offload="optimizer", device="cpu")
    assert hbm.grads == grads
    assert hbm.params == (2 * PSI / 8 if zero == 3 else 2 * PSI)
    assert host.dram == pytest.approx(14 * PSI / 8)


def test_nvme_holds_the_optimizer_states_and_params_offload_the_params():
    hbm, host = offloaded_state_bytes(PSI, zero_stage=3, shard_ranks=4, offload="params", device="nvme")
    assert hbm.params == 0.0 and hbm.optimizer == 0.0
    assert host.nvme == pytest.approx((12 + 2) * PSI / 4) and host.dram == pytest.approx(2 * PSI / 4)


@pytest.mark.parametrize("kwargs,field", [
    ({"offload": "params", "zero": 2, "dp": 2, "global_batch": 2}, "offload='params'"),
    ({"offload": "optimizer", "zero": 0}, "offload='optimizer'"),
    ({"offload": "gpu"}, "offload='gpu'"),
    ({"offload": "optimizer", "zero": 1, "offload_device": "disk"}, "offload_device='disk'"),
])
def test_invalid_offload_plans_name_field_and_value(kwargs, field):
    with pytest.raises(ValueError) as err:
        ParallelPlan(**kwargs)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_zero_infinity_params_offload_requires_zero3():
    with pytest.raises(ValueError, match="needs zero = 3"):
        ParallelPlan(dp=2, global_batch=2, zero=2, offload="params")
    ParallelPlan(dp=2, global_batch=2, zero=3, offload="params")


def _graph(plan: ParallelPlan):
    model = get_model("tiny")
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return model, build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)


def test_optimizer_offload_tasks_move_each_byte_once():
    # ZeRO-Offload is DeepSpeed's: gradients in the model's dtype (2 bytes), as they are copied
    plan = ParallelPlan(dp=4, zero=1, global_batch=8, offload="optimizer", grad_reduce_dtype="compute")
    model, graph = _graph(plan)
    psi_shard = plan_stages(model, plan)[0].params_local / 4
    ops = [op for t in graph.tasks for op in t.ops]
    d2h = sum(op.bytes for op in ops if op.op_class == "pcie_to_host")
    h2d = sum(op.bytes for op in ops if op.op_class == "pcie_to_device")
    adam = [op for op in ops if op.op_class == "cpu_adam"]
    assert d2h == pytest.approx(2 * psi_shard) and h2d == pytest.approx(2 * psi_shard)
    assert len(adam) == 1 and adam[0].bytes == pytest.approx(28 * psi_shard)
    assert not any(t.kind == "optimizer" and t.lane == "compute" for t in graph.tasks)
    # Megatron's fp32 gradient buffer is copied as fp32
    _, fp32 = _graph(dataclasses.replace(plan, grad_reduce_dtype="fp32"))
    assert sum(op.bytes for t in fp32.tasks for op in t.ops if op.op_class == "pcie_to_host") == pytest.approx(d2h * 2)


def test_params_offload_fetches_each_layer_shard_before_its_gather():
    plan = ParallelPlan(dp=2, zero=3, global_batch=2, offload="params", offload_device="nvme")
    model, graph = _graph(plan)
    fetches = [i for i, t in enumerate(graph.tasks) if t.name == "param h2d"]
    gathers = [i for i, t in enumerate(graph.tasks) if t.kind == "all_gather"]
    assert len(fetches) == len(gathers) == 2 * model.num_layers  # forward and backward, one microbatch
    assert all(any(d in fetches for d in graph.deps[g]) for g in gathers)
    reads = [t for t in graph.tasks if t.name == "param nvme read"]
    assert len(reads) == len(fetches)
