"""The parallel plan: how a model is split over GPUs and how a step is run.

A plan is the union of its concerns, each a frozen dataclass whose fields are settings declared
once (:mod:`core.settings`: valid values, help, job-file section and source): the layout
(:mod:`schedules.plan.layout`), the data-parallel sharding (:mod:`schedules.plan.sharding`), the
runtime and its kernels (:mod:`schedules.plan.runtime`), the precision
(:mod:`schedules.plan.precision`), offload (:mod:`schedules.plan.offload`) and expert parallelism
(:mod:`schedules.plan.experts`). A plan is validated on its own when built (each field by its rule,
then the rules across concerns) and against a model by :func:`check_plan` (divisibility of
layers, heads, batch). Errors name the field, the value and what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid
from core.groups import DP, Axis, CommGroup
from core.settings import check_declared
from core.vocab import Offload, OffloadDevice, Runtime
from schedules.model import ModelSpec
from schedules.moe import check_expert_plan
from schedules.pipeline import interleave_group
from schedules.plan.experts import ExpertParallel
from schedules.plan.layout import (
    INTERLEAVED_SCHEDULES,
    LOCKSTEP_SCHEDULES,
    SINGLE_CHUNK_SCHEDULES,
    TORCH_INTERLEAVED_SCHEDULES,
    V_SCHEDULES,
    Layout,
)
from schedules.plan.offload import Offloading
from schedules.plan.precision import Precision
from schedules.plan.runtime import BLACKWELL_CC, RuntimeKernels
from schedules.plan.sharding import Sharding

CONCERNS = (Layout, Sharding, RuntimeKernels, Precision, Offloading, ExpertParallel)
"""The plan's concerns, in the order their settings are listed (flags, job files, docs)."""


@dataclass(frozen=True, kw_only=True)
class ParallelPlan(ExpertParallel, Offloading, Precision, RuntimeKernels, Sharding, Layout):
    """Parallelism degrees and step settings: every field of the concerns (:data:`CONCERNS`),
    documented in their modules. See :mod:`schedules.fp8` for FP8's mechanics and
    :mod:`schedules.frameworks` for the stacks that make these choices."""

    def __post_init__(self) -> None:
        check_declared(self, invalid)
        self._check_zero3_gather()
        if self.framework != Runtime.TORCH and not self.master_weights:
            raise invalid("master_weights", self.master_weights, "training without fp32 master weights is "
                          f"modelled for framework=torch only (got framework={self.framework})")
        if self.framework != Runtime.TORCH and self.loss_dtype != "fp32":
            raise invalid("loss_dtype", self.loss_dtype, "a loss in the compute dtype is modelled for "
                          f"framework=torch only (got framework={self.framework})")
        self._check_grad_sync()
        if self.zero1_grad_reduction != "reduce-scatter" and (self.zero != 1 or self.framework != Runtime.MEGATRON
                                                              or self.offload != Offload.NONE):
            raise invalid("zero1_grad_reduction", self.zero1_grad_reduction, "an all-reduce under ZeRO-1 is modelled "
                          f"for framework=megatron with zero=1 and no offload (got framework={self.framework}, "
                          f"zero={self.zero}, offload={self.offload})")
        if not self.master_weights and self.offload != Offload.NONE:
            raise invalid("master_weights", self.master_weights, "offload moves fp32 optimizer states: "
                          "needs master_weights=true")
        if self.global_batch % (self.dp * self.microbatch_size):
            raise invalid("global_batch", self.global_batch,
                          f"must be divisible by dp*microbatch_size = {self.dp * self.microbatch_size}")
        self._check_schedule()
        self._check_offload()
        self._check_experts()
        self._check_hybrid_sharding()

    def _check_zero3_gather(self) -> None:
        if self.zero3_gather != "per-param":
            return
        if self.zero3_unit != "module" or self.framework != Runtime.MEGATRON:
            raise invalid("zero3_gather", self.zero3_gather, "DeepSpeed's per-parameter collectives need "
                          f"zero3_unit=module and framework=megatron (got zero3_unit={self.zero3_unit}, "
                          f"framework={self.framework})")
        if self.schedule in ("zb-h1", "interleaved-zb", *V_SCHEDULES):
            raise invalid("zero3_gather", self.zero3_gather, "DeepSpeed's per-parameter collectives are modelled "
                          f"with a whole backward (got schedule={self.schedule}, which splits it)")
        if self.offload != Offload.NONE:
            raise invalid("zero3_gather", self.zero3_gather, f"DeepSpeed's per-parameter collectives are not "
                          f"modelled with offload (got offload={self.offload})")

    @property
    def per_param_zero3(self) -> bool:
        """ZeRO-3 runs DeepSpeed 2021's per-parameter collectives (``zero3_gather``)."""
        return self.zero == 3 and self.zero3_gather == "per-param"

    def _check_hybrid_sharding(self) -> None:
        """Hybrid sharding (FSDP's ``HYBRID_SHARD``, FSDP2 on a 2-D (replicate, shard) mesh)."""
        if self.dp_replicate == 1:
            return
        if self.dp % self.dp_replicate or self.dp == self.dp_replicate:
            raise invalid("dp_replicate", self.dp_replicate, f"must divide dp={self.dp} and leave at least two "
                          "ranks per replica")
        if self.zero != 3 or self.framework != Runtime.TORCH:
            raise invalid("dp_replicate", self.dp_replicate, "hybrid sharding (replicas > 1) models FSDP's: "
                          f"needs zero=3 and framework=torch (got zero={self.zero}, framework={self.framework})")
        if self.offload != Offload.NONE or self.ep > 1:
            raise invalid("dp_replicate", self.dp_replicate, "hybrid sharding is not modelled with offload or "
                          "expert parallelism")

    def _check_grad_sync(self) -> None:
        if self.grad_sync == "auto":
            return
        if self.framework != Runtime.TORCH or self.zero < 2 or not self.overlap_grad_reduce:
            raise invalid("grad_sync", self.grad_sync, "FSDP's per-micro-batch reduction is modelled for "
                          "framework=torch with zero >= 2 and overlap_grad_reduce (got framework="
                          f"{self.framework}, zero={self.zero}, overlap_grad_reduce={self.overlap_grad_reduce})")

    def _check_experts(self) -> None:
        if self.dp % self.ep:
            raise invalid("ep", self.ep, f"must divide dp={self.dp} (experts are split inside the DP group)")
        if self.tp % self.etp:
            raise invalid("etp", self.etp, f"must divide tp={self.tp}")

    def _check_offload(self) -> None:
        if self.offload == Offload.NONE and not self.offload_activations:
            return
        if self.framework != Runtime.MEGATRON:
            self._check_torch_offload()
            return
        if self.offload == Offload.OPTIMIZER and self.zero < 1:
            raise invalid("offload", self.offload, "optimizer offload (ZeRO-Offload) needs zero >= 1")
        if self.offload == Offload.PARAMS and self.zero != 3:
            raise invalid("offload", self.offload, "params offload (ZeRO-Infinity) needs zero = 3")

    def _check_torch_offload(self) -> None:
        """framework=torch runs FSDP2's ``CPUOffloadPolicy`` (see :mod:`schedules.passes.dp_torch`)."""
        if self.offload_activations:
            raise invalid("offload_activations", self.offload_activations, "framework=torch models FSDP2's CPU "
                          "offload of the optimizer only, not activation offload")
        if self.offload != Offload.OPTIMIZER or self.zero < 2 or self.dp < 2 or self.offload_device != OffloadDevice.CPU:
            raise invalid("offload", self.offload, "framework=torch models FSDP2's CPU offload only: "
                          "offload=optimizer with dp >= 2, zero 2 or 3 and offload_device=cpu "
                          f"(got zero={self.zero}, dp={self.dp}, offload_device={self.offload_device})")

    def _check_schedule(self) -> None:
        if self.schedule in INTERLEAVED_SCHEDULES and self.vpp < 2:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} needs vpp >= 2")
        if self.schedule in V_SCHEDULES and self.vpp != 2:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} runs exactly 2 chunks per rank (vpp=2)")
        if self.vpp > 1 and self.schedule in SINGLE_CHUNK_SCHEDULES:
            raise invalid("vpp", self.vpp, f"vpp > 1 needs an interleaved or V schedule, not {self.schedule}")
        if self.framework == Runtime.MEGATRON and self.pipeline_p2p == "blocking" and self.vpp > 1 \
                and self.schedule not in LOCKSTEP_SCHEDULES:
            raise invalid("pipeline_p2p", self.pipeline_p2p,
                          f"blocking P2P is modelled for one-chunk schedules (gpipe, 1f1b, zb-h1) and Megatron's "
                          f"interleaved 1F1B in lock-step ({', '.join(LOCKSTEP_SCHEDULES)}); Megatron has no blocking "
                          f"{self.schedule}: use async or auto")

    @property
    def blocking_p2p(self) -> bool:
        """The megatron runtime's pipeline sends and receives block the compute (``pipeline_p2p``)."""
        if self.framework != Runtime.MEGATRON or self.pipeline_p2p == "async":
            return False
        return self.pipeline_p2p == "blocking" or self.schedule in ("gpipe", "1f1b")

    @property
    def scatter_gather_p2p(self) -> bool:
        """Pipeline messages go 1/tp per TP rank and are all-gathered on arrival
        (``pipeline_scatter_gather``: the megatron runtime's blocking P2P, tp > 1, no sequence
        parallelism, whose messages are already 1/tp)."""
        return self.pipeline_scatter_gather and self.blocking_p2p and self.tp > 1 and not self.sequence_parallel

    def single_device_queue(self, compute_capability: int) -> bool:
        """One hardware work queue per GPU (``device_connections``; "auto": the megatron runtime
        with tp or cp > 1 on a CUDA device of ``compute_capability`` (x10) below Blackwell's)."""
        if self.device_connections != "auto":
            return self.device_connections == "1"
        return self.framework == Runtime.MEGATRON and (self.tp > 1 or self.cp > 1) and 0 < compute_capability < BLACKWELL_CC

    @property
    def grad_reduce_bytes(self) -> int:
        """Bytes per gradient element in data-parallel reductions (``grad_reduce_dtype``)."""
        fp32 = self.grad_reduce_dtype == "fp32" or (self.grad_reduce_dtype == "auto" and self.framework == Runtime.MEGATRON
                                                   and self.compute_dtype == "bf16")
        return 4 if fp32 else self.element_bytes

    @property
    def edp(self) -> int:
        """Expert data parallelism: replicas of each expert shard, (tp x cp x dp) / (ep x etp)
        (Megatron-Core's expert-data-parallel group)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    @property
    def overlaps_moe(self) -> bool:
        """Dispatch/combine all-to-alls overlap another micro-batch's compute (``moe_overlap``;
        "auto": under DualPipeV)."""
        return self.moe_overlap == "on" or (self.moe_overlap == "auto" and self.schedule == "dualpipev")

    @property
    def zero_shard(self) -> int:
        """Ranks one copy of the model states is sharded over (ZeRO / FSDP): the DP x CP group, or
        under hybrid sharding (``dp_replicate`` > 1) one replica's share of it."""
        return self.dp * self.cp // self.dp_replicate

    @property
    def shard_dim(self) -> CommGroup:
        """The group ZeRO shards over: the DP x CP group, or under hybrid sharding one replica's
        ranks (:mod:`sim.hybrid_groups`)."""
        return CommGroup.hybrid(Axis.DP_SHARD, self.dp_replicate) if self.hybrid else DP

    @property
    def replicate_dim(self) -> CommGroup:
        """The group across replicas under hybrid sharding."""
        return CommGroup.hybrid(Axis.DP_REPLICATE, self.dp_replicate)


def check_plan(model: ModelSpec, plan: ParallelPlan) -> None:
    """Raise ``ValueError`` if ``plan`` cannot run ``model`` (divisibility rules of Megatron-LM)."""
    stages = plan.pp * plan.vpp
    if plan.num_microbatches < 1:
        raise invalid("global_batch", plan.global_batch, "needs at least one micro-batch per DP rank")
    if model.num_layers % stages and not plan.uneven_stages:
        raise invalid("pp", plan.pp, f"num_layers={model.num_layers} must be divisible by pp*vpp={stages} "
                      "(or pass uneven_stages)")
    if model.num_layers < stages:
        raise invalid("pp", plan.pp, f"pp*vpp={stages} exceeds num_layers={model.num_layers}")
    if model.num_heads % plan.tp:
        raise invalid("tp", plan.tp, f"must divide num_heads={model.num_heads}")
    if model.kv_heads % plan.tp and plan.tp % model.kv_heads:
        raise invalid("tp", plan.tp, f"must divide or be a multiple of num_kv_heads={model.kv_heads}")
    if model.seq_len % (2 * plan.cp) and plan.cp > 1:
        raise invalid("cp", plan.cp, f"seq_len={model.seq_len} must be divisible by 2*cp")
    check_expert_plan(model, plan)  # the model's experts (none: no expert parallelism)
    if plan.schedule == "interleaved-megatron" and plan.pp > 1 and plan.num_microbatches % plan.pp:
        raise invalid("global_batch", plan.global_batch,
                      f"interleaved needs micro-batches ({plan.num_microbatches}) divisible by pp={plan.pp}")
    if plan.schedule in TORCH_INTERLEAVED_SCHEDULES and plan.pp > 1:
        interleave_group(plan.pp, plan.num_microbatches, plan.schedule)  # torch's rounds rule


def stage_layers(model: ModelSpec, plan: ParallelPlan) -> list[int]:
    """Layers held by each virtual stage (pp*vpp entries, in pipeline order).

    Even split when divisible. Otherwise (``uneven_stages``) the layers are spread as evenly as
    possible with the remainder taken from the first and last stages, which also hold the
    embedding and the loss (as the Llama 3 paper does for 126 layers on 16 stages).
    """
    stages = plan.pp * plan.vpp
    base, extra = divmod(model.num_layers, stages)
    if extra == 0:
        return [base] * stages
    counts = [base + 1] * stages
    deficit = stages - extra
    order = [0, stages - 1] + list(range(1, stages - 1))
    for i in range(deficit):
        counts[order[i % stages]] -= 1
    return counts
