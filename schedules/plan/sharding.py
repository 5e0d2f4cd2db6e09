"""The plan's data-parallel sharding: ZeRO / FSDP stages, when gradients are reduced and
parameters gathered, hybrid sharding.

Attributes of :class:`Sharding`:
    zero: ZeRO stage 0-3 (1: optimizer states sharded, 2: + grads, 3: + params).
    dp_bucket_bytes: gradient bucket size for the overlapped DP reduction (bytes).
    overlap_grad_reduce: DP gradient reduction overlaps the last backward (framework="torch",
        ZeRO-2/3, pp = 1: FSDP's post-backward hooks reduce each block as its backward ends, in
        every micro-batch's backward; False: after the last backward, as
        ``torch.distributed.pipelining`` and so the included trainer do).
    delay_grad_reduce: with ``overlap_grad_reduce`` under the megatron runtime's non-interleaved
        pipeline schedules, only the first pipeline stage reduces its gradients during its last
        backward; the other stages launch theirs after their last backward and its send ("do grad
        reduction during pipeline bubble"): Megatron-Core r0.8.0 ``--no-delay-grad-reduce``
        (store_false, default on: "delay / synchronize grad reductions in all but first PP
        stage", arguments.py l.1422-1424), training.py l.1001-1004 sets ``grad_sync_func``, and
        schedules.py l.1483-1506 enables the reduction in the last backward only on pipeline
        rank 0 and calls ``grad_sync_func`` after the cool-down elsewhere; still the default at
        d98e8a6 as ``align_grad_reduce`` (config/common_config.py l.80, training.py l.4356-4359).
        The interleaved schedule's aligned launch (schedules.py l.797-804) is not modelled.
    overlap_param_gather: ZeRO parameter all-gathers are prefetched under compute.
    zero3_unit: what ZeRO-3 gathers at once: a transformer "block" or each weight "module".
    zero3_gather: with ``zero3_unit="module"``, how DeepSpeed's ZeRO-3 calls its collectives:
        "coalesced" (v0.6+: a submodule's parameters in one call, prefetched under compute) or
        "per-param" (v0.3.13-v0.5.x, 2021: a list-API all_gather per weight built by a Python
        loop over the ranks after a device synchronize, a device synchronize at every
        submodule fetch, a list-API reduce_scatter per gradient tensor in every micro-batch's
        backward: :mod:`schedules.passes.zero3_2021`).
    zero3_max_live_params, zero3_max_reuse_distance, zero3_prefetch_bucket_params: with
        ``zero3_unit="module"``, DeepSpeed's ``stage3_max_live_parameters``,
        ``stage3_max_reuse_distance`` and ``stage3_prefetch_bucket_size`` (elements; defaults
        DeepSpeed's own), which decide what is prefetched and what is gathered again
        (:mod:`schedules.passes.zero3_fetch`).
    fsdp_reshard_after_forward: framework="torch", ZeRO-3: which FSDP units free their gathered
        parameters after forward: "all" (the root too: the included trainer passes
        ``reshard_after_forward=True`` to every unit, which torch 2.13 applies to the root),
        "non-root" (FSDP's default: the root keeps them for the backward) or "torchtitan"
        (also the last block without PP, none with PP); see :mod:`schedules.passes.fsdp_gather`.
    dp_replicate: hybrid sharding (FSDP ``HYBRID_SHARD``, torchtitan
        ``data_parallel_replicate_degree``): the DP group splits into ``dp_replicate``
        replicas (outermost) of dp / dp_replicate ranks; ZeRO-3 shards the states and gathers
        the parameters inside a replica, and each gradient shard, reduce-scattered there, is
        then all-reduced across the replicas (:mod:`schedules.passes.fsdp_reduce`). 1: plain
        FSDP over the whole DP group. Needs zero=3 and framework="torch".
    zero1_grad_reduction: megatron runtime, ZeRO-1: how the gradients are reduced before each
        rank updates its shard: "reduce-scatter" (Megatron-LM's distributed optimizer, DeepSpeed's
        ZeRO stage 1-2 optimizer) or "all-reduce" of the whole gradient (DeepSpeed's BF16_Optimizer
        under the pipeline engine: ``_bf16_reduce_grads`` all-reduces the optimizer's flat fp32
        gradients, ``get_grads_for_reduction``, with ``buffered_allreduce_fallback``;
        deepspeed/runtime/pipe/engine.py since v0.6, and the BF16_Optimizer then all-gathers the
        updated bf16 partitions). The all-reduce moves twice a reduce-scatter's bytes.
    grad_sync: framework="torch", ZeRO-2/3: when the data-parallel gradients are reduced.
        "auto": as the runtime does for an FSDP stage: ``torch.distributed.pipelining`` (any
        pp > 1, and the included trainer) turns gradient sync off for a stage's backwards and
        reduces after the last one; a plain ``loss.backward()`` without PP reduces in every
        micro-batch's backward (``overlap_grad_reduce``). "every-microbatch": FSDP's own
        post-backward hooks reduce (and reshard) in every micro-batch's backward under PP too:
        pipelining turns sync off only when the stage module is itself an ``FSDPModule``
        (torch ``pipelining/stage.py`` ``backward_maybe_with_nosync``: any other submodule
        gets a "regular backward"), as for NeMo AutoModel's MoE models before 2025-10-08,
        which shard ``model.model`` and not the stage's causal-LM module. Needs
        ``overlap_grad_reduce`` and an unsplit backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid
from core.settings import BOOLEAN, check_declared, choice, integer, number, setting
from schedules.plan.layout import DEGREE

ZERO_STAGES = (0, 1, 2, 3)
ZERO3_UNITS = ("block", "module")
ZERO3_GATHERS = ("coalesced", "per-param")
FSDP_RESHARD_KINDS = ("all", "non-root", "torchtitan")
GRAD_SYNC_KINDS = ("auto", "every-microbatch")
ZERO1_GRAD_REDUCTIONS = ("reduce-scatter", "all-reduce")
PARAMS = number(0, 1e15)


def _deepspeed(key: str) -> str:
    return f"with --zero3-unit module: DeepSpeed's {key} (default DeepSpeed's)"


@dataclass(frozen=True, kw_only=True)
class Sharding:
    """ZeRO / FSDP sharding and the data-parallel reduction (see the module docstring)."""

    zero: int = setting(0, rule=choice(ZERO_STAGES), help="ZeRO stage")
    dp_bucket_bytes: int = setting(40_000_000 * 2, rule=integer(1, 10**13), help="DP gradient bucket size",
                                   metavar="BYTES", source="Megatron-LM's DDP bucket of 40M bf16 elements")
    overlap_grad_reduce: bool = setting(True, rule=BOOLEAN, help="overlap the DP gradient reduction with the "
                                        "last backward (default on)")
    delay_grad_reduce: bool = setting(False, rule=BOOLEAN, help="megatron, non-interleaved PP: stages after the "
                                      "first reduce their gradients after their last backward (Megatron-Core "
                                      "--delay-grad-reduce / align_grad_reduce)",
                                      source="Megatron-Core r0.8.0 arguments.py l.1422-1424, "
                                             "pipeline_parallel/schedules.py l.1483-1506")
    overlap_param_gather: bool = setting(True, rule=BOOLEAN, help="prefetch ZeRO parameter all-gathers under "
                                         "compute (default on)")
    zero3_unit: str = setting("block", rule=choice(ZERO3_UNITS), help="what ZeRO-3 gathers at once")
    zero3_gather: str = setting("coalesced", rule=choice(ZERO3_GATHERS),
                                help="with --zero3-unit module: coalesced (DeepSpeed >= 0.6) or per-param (DeepSpeed "
                                     "2021: a list-API collective per weight after a device synchronize)",
                                source="DeepSpeed stage3.py/partition_parameters.py @v0.5.0 (per-param), v0.6+ "
                                       "(coalesced)")
    zero3_max_live_params: float = setting(1e9, rule=PARAMS, help=_deepspeed("stage3_max_live_parameters"),
                                           metavar="ELEMENTS", source="DeepSpeed's default")
    zero3_max_reuse_distance: float = setting(1e9, rule=PARAMS, help=_deepspeed("stage3_max_reuse_distance"),
                                              metavar="ELEMENTS", source="DeepSpeed's default")
    zero3_prefetch_bucket_params: float = setting(5e7, rule=PARAMS, help=_deepspeed("stage3_prefetch_bucket_size"),
                                                  metavar="ELEMENTS", source="DeepSpeed's default")
    fsdp_reshard_after_forward: str = setting(
        "all", rule=choice(FSDP_RESHARD_KINDS),
        help="torch runtime, ZeRO-3: which FSDP units free their gathered parameters after forward: all (the "
             "included trainer's), non-root (FSDP's default) or torchtitan (also the last block without PP, none "
             "with PP)")
    dp_replicate: int = setting(1, rule=DEGREE, help="hybrid sharding (FSDP HYBRID_SHARD, with --zero 3 and a torch "
                                "framework): DP replicas, each sharding the states over dp/dp_replicate ranks "
                                "(default 1)")
    zero1_grad_reduction: str = setting("reduce-scatter", rule=choice(ZERO1_GRAD_REDUCTIONS),
                                        help="megatron runtime, ZeRO-1: reduce-scatter the gradients (Megatron's "
                                             "distributed optimizer) or all-reduce them whole (DeepSpeed's "
                                             "BF16_Optimizer under its pipeline engine)",
                                        source="DeepSpeed pipe/engine.py _bf16_reduce_grads (v0.6+): "
                                               "buffered_allreduce_fallback(grads=optimizer.get_grads_for_reduction())")
    grad_sync: str = setting("auto", rule=choice(GRAD_SYNC_KINDS),
                             help="torch runtime, ZeRO-2/3: auto (pipelining reduces after a stage's last backward) "
                                  "or every-microbatch (FSDP's hooks reduce in every backward under PP too, as NeMo "
                                  "AutoModel's MoE models did before 2025-10-08)")

    def __post_init__(self) -> None:
        check_declared(self, invalid)

    @property
    def all_reduces_grads(self) -> bool:
        """Are the data-parallel gradients all-reduced (ZeRO-0, or ZeRO-1 with
        ``zero1_grad_reduction="all-reduce"``) rather than reduce-scattered?"""
        return self.zero == 0 or (self.zero == 1 and self.zero1_grad_reduction == "all-reduce")

    @property
    def hybrid(self) -> bool:
        """Hybrid sharding: states sharded inside a replica, gradients all-reduced across replicas."""
        return self.dp_replicate > 1
