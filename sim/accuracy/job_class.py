"""The features by which published runs are comparable to a job: precision, GPU generation,
parallelism class, scale and runtime.

Parallelism class (first rule that holds): ``moe`` (an MoE model), ``pipeline`` (pp > 1: 3D
parallelism), ``fsdp+tp`` (ZeRO-3 with tensor parallelism), ``fsdp`` (ZeRO-3 sharding only),
``tp`` (tensor parallelism over replicated or ZeRO-1/2 data parallelism), ``dp`` (data
parallelism only). GPU generation: the device's CUDA architecture (:attr:`topo.device.DeviceSpec.nccl_arch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.job import Job
from topo.device import DeviceSpec


@dataclass(frozen=True, kw_only=True)
class JobClass:
    """What a job's prediction is compared by.

    Attributes:
        precision: the plan's dtype ("bf16", "fp8", "fp32").
        generation: GPU architecture ("ampere", "hopper", "blackwell", ...; "cpu" without CUDA).
        parallelism: parallelism class (module docstring).
        gpus: world size.
        runtime: the plan's runtime ("megatron" or "torch").
    """

    precision: str
    generation: str
    parallelism: str
    gpus: int
    runtime: str

    def scale_distance(self, other: JobClass) -> float:
        """|log2| of the GPU-count ratio (1.0 = a factor of two apart)."""
        return abs(math.log2(self.gpus / other.gpus))


def parallelism_class(model: ModelSpec, plan: ParallelPlan) -> str:
    """The parallelism class of ``model`` under ``plan`` (module docstring): its layer kind's
    (an MoE model's: "moe"), else its plan's."""
    return layer_kind(model).comparison_class or _plan_parallelism(plan)


def _plan_parallelism(plan: ParallelPlan) -> str:
    """The parallelism class of a dense model's ``plan``."""
    if plan.pp > 1:
        return "pipeline"
    if plan.zero == 3:
        return "fsdp+tp" if plan.tp > 1 else "fsdp"
    return "tp" if plan.tp > 1 else "dp"


def plan_class(model: ModelSpec, plan: ParallelPlan, device: DeviceSpec) -> JobClass:
    """The comparison features of ``model`` trained under ``plan`` on ``device`` GPUs."""
    return JobClass(precision=plan.dtype, generation=device.nccl_arch or "cpu",
                    parallelism=parallelism_class(model, plan), gpus=plan.world_size, runtime=plan.framework)


def job_class(job: Job) -> JobClass:
    """The comparison features of ``job``."""
    return plan_class(job.model, job.plan, job.cluster.device)
