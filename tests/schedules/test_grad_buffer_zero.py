"""Zeroing the contiguous gradient buffer each step (schedules/stage_ops.py ``zeroes_grad_buffer``,
``GRAD_BUFFER_ZERO_BYTES``): which stacks run it, and that it covers every local parameter while
the distributed optimizer's Adam covers only the rank's 1/DP shard.

The facts (read in the sources; restated in schedules/optimizer_traffic.py): Megatron-LM's
``zero_grad_buffer`` runs ``grad_data.zero_()`` on the whole buffer at every iteration's start
(core_v0.8.0 distributed_data_parallel.py l.274-283, param_and_grad_buffer.py l.503-508), a buffer
with one fp32 ``main_grad`` per local parameter on every data-parallel rank; DeepSpeed's
BF16_Optimizer zeroes its flat fp32 gradient copies (``clear_hp_grads``); autograd's accumulation
leaves gradients to be set to None (no kernel)."""

from __future__ import annotations

import pytest

from schedules.frameworks import get_framework
from schedules.model_presets import get_model
from schedules.optimizer_traffic import GRAD_BUFFER_ZERO_BYTES
from schedules.plan import ParallelPlan
from schedules.stage_ops import adam_bytes_per_param, grad_buffer_params, zeroes_grad_buffer
from schedules.stages import plan_stages
from schedules.step_end_syncs import NORM_READ_BYTES_PER_PARAM
from sim.job import Job
from sim.simulate import simulate
from topo.cluster_presets import get_cluster

MODEL = get_model("gpt3-1.7b")


def _plan(preset: str, **fields: object) -> ParallelPlan:
    return ParallelPlan(**{**get_framework(preset).plan_fields(), "global_batch": 64, **fields})


@pytest.mark.parametrize(("preset", "fields", "zeroes"), [
    ("megatron-core", {"zero": 1}, True),  # distributed optimizer: the buffer stays full size
    ("megatron-core", {"zero": 0}, True),
    ("nemo", {}, True),
    ("megatron-2023", {"zero": 1}, True),
    ("megatron-2021", {}, False),  # autograd accumulation: gradients set to None
    ("deepspeed", {"zero": 1, "grad_accumulation": "fp32-copy"}, True),  # BF16_Optimizer.clear_hp_grads
    ("deepspeed", {"zero": 3}, True),  # ZeRO-3: a buffer of the rank's partition
    ("deepspeed", {"zero": 1, "offload": "optimizer"}, False),  # the step runs on the host
    ("fsdp2", {}, False),
    ("torchtitan", {}, False),
])
def test_which_stacks_zero_a_gradient_buffer(preset: str, fields: dict[str, object], zeroes: bool) -> None:
    assert zeroes_grad_buffer(_plan(preset, **fields)) is zeroes


def _optimizer_bytes(dp: int) -> tuple[float, float, ParallelPlan, float]:
    plan = _plan("megatron-core", tp=2, pp=1, dp=dp, zero=1, microbatch_size=1, global_batch=4 * dp)
    job = Job(model=MODEL, plan=plan, cluster=get_cluster("dgx-h100", nodes=2 * dp // 8))
    spans = simulate(job).timeline.spans
    rank0 = spans[spans["rank"] == 0]

    def total(name: str) -> float:
        return float(rank0[rank0["name"].astype(str) == name]["bytes"].sum())

    return total("optimizer.step"), total("grad_buffer.zero"), plan, total("grad_norm")


def test_the_zeroing_covers_every_local_parameter_and_adam_only_the_shard() -> None:
    (step8, zero8, plan8, norm8), (step16, zero16, _, _) = _optimizer_bytes(8), _optimizer_bytes(16)
    local = sum(s.params_local for s in plan_stages(MODEL, plan8))  # one TP rank's parameters, unsharded
    assert zero8 == pytest.approx(GRAD_BUFFER_ZERO_BYTES * local, rel=1e-12)
    assert zero16 == pytest.approx(zero8, rel=1e-12)  # the buffer does not shrink with DP
    # Adam and the clip's norm read (its own task before the norm's all-reduce) cover the shard
    assert step8 + norm8 == pytest.approx(adam_bytes_per_param(plan8) * local / 8, rel=1e-12)
    assert norm8 == pytest.approx(NORM_READ_BYTES_PER_PARAM * local / 8, rel=1e-12)
    assert step16 == pytest.approx(step8 / 2, rel=1e-12)  # Adam's shard does
    assert GRAD_BUFFER_ZERO_BYTES == 4  # fp32 main_grad: Megatron forces fp32 accumulation for bf16


def test_under_zero3_the_buffer_is_the_ranks_partition() -> None:
    assert grad_buffer_params(_plan("megatron-core", zero=1), 1e9, 8) == 1e9
    assert grad_buffer_params(_plan("deepspeed", zero=3), 1e9, 8) == pytest.approx(1.25e8)
