"""The parallel plan: how a model is split over GPUs and how a step is run.

A plan is validated on its own when built (ranges, choices) and against a model by
:func:`check_plan` (divisibility of layers, heads, batch). Errors name the field, the value and
what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import invalid, require_choice, require_positive_int
from core.groups import DP, Axis, CommGroup
from core.vocab import Offload, OffloadDevice, Runtime
from schedules.attention_kernels import ATTENTION_KERNELS
from schedules.model import ModelSpec
from schedules.pipeline import interleave_group

RECOMPUTE_KINDS = ("none", "selective", "full")
DTYPES = ("bf16", "fp8", "fp32")
FRAMEWORKS = tuple(Runtime)
SINGLE_CHUNK_SCHEDULES = ("gpipe", "1f1b", "zb-h1")
INTERLEAVED_SCHEDULES = ("interleaved", "interleaved-megatron", "interleaved-zb")
TORCH_INTERLEAVED_SCHEDULES = ("interleaved", "interleaved-zb")  # torch's rounds of max(1, m // pp)
V_SCHEDULES = ("zbv", "dualpipev")
SCHEDULE_NAMES = SINGLE_CHUNK_SCHEDULES + INTERLEAVED_SCHEDULES + V_SCHEDULES
DIMENSIONS = ("tp", "cp", "dp", "pp")
OFFLOAD_KINDS = tuple(Offload)
OFFLOAD_DEVICES = tuple(OffloadDevice)
ELEMENTWISE_KINDS = ("auto", "fused", "eager")
OPTIMIZER_KINDS = ("auto", "fused", "foreach")
SELECTIVE_KINDS = ("attention", "alternate-matmul", "layernorm-moe-act")
ZERO3_UNITS = ("block", "module")
ZERO3_GATHERS = ("coalesced", "per-param")
FSDP_RESHARD_KINDS = ("all", "non-root", "torchtitan")
ACTIVATION_OFFLOAD_UNITS = ("stage", "layer")
GRAD_REDUCE_DTYPES = ("auto", "fp32", "compute")
LOSS_DTYPES = ("fp32", "compute")
MOE_OVERLAP_KINDS = ("auto", "on", "off")
MOE_DISPATCHERS = ("alltoall", "deepep")
GRAD_SYNC_KINDS = ("auto", "every-microbatch")
FP8_RECIPES = ("delayed", "tensorwise", "rowwise", "blockwise", "mxfp8")
FP8_WEIGHT_CASTS = ("step", "microbatch", "use")
PIPELINE_P2P_KINDS = ("auto", "async", "blocking")


@dataclass(frozen=True, kw_only=True)
class ParallelPlan:
    """Parallelism degrees and step settings.

    Attributes:
        tp, cp, pp, dp: tensor, context, pipeline and data parallel degrees.
        vpp: virtual pipeline chunks per pipeline rank (interleaved / V schedules).
        microbatch_size: sequences per micro-batch.
        global_batch: sequences per optimizer step (over all DP replicas).
        zero: ZeRO stage 0-3 (1: optimizer states sharded, 2: + grads, 3: + params).
        sequence_parallel: shard norm/dropout activations over TP (all-gather/reduce-scatter).
        recompute: activation recomputation: none | selective | full.
        dtype: compute dtype of the matmuls: bf16 | fp8 | fp32 (fp32: activations, gradients and
            parameters travel in 4-byte floats, as the included trainer runs on CPUs).
        schedule: pipeline schedule name.
        flash_attention: attention kernel that never stores the s x s matrix.
        attention_kernel: which flash kernel: "flash2" (FlashAttention-2, the device's measured
            rate) or "triton" (FlashAttention in Triton, slower per pass:
            :mod:`schedules.attention_kernels`); unused without flash attention.
        dp_bucket_bytes: gradient bucket size for the overlapped DP reduction (bytes).
        overlap_grad_reduce: DP gradient reduction overlaps the last backward (framework="torch",
            ZeRO-2/3, pp = 1: FSDP's post-backward hooks reduce each block as its backward ends, in
            every micro-batch's backward; False: after the last backward, as
            ``torch.distributed.pipelining`` and so the included trainer do).
        overlap_param_gather: ZeRO parameter all-gathers are prefetched under compute.
        uneven_stages: allow num_layers not divisible by pp*vpp (first and last stages get fewer).
        placement: parallel dimensions from innermost (consecutive devices) to outermost.
        framework: whose runtime is modelled: "megatron" (Megatron-LM/DeepSpeed: DDP or the
            distributed optimizer, eager pipeline sends) or "torch" (the included trainer:
            FSDP2 ``fully_shard``/``replicate`` units per block, ZeRO-1 by broadcasts, and
            ``torch.distributed.pipelining``'s posted receives and send waits); see
            :mod:`schedules.passes.dp_torch` and :mod:`schedules.passes.p2p_torch`.
        offload: ZeRO-Offload/Infinity: "none", "optimizer" (fp32 master weights and Adam
            states on the host, Adam on the CPU; needs zero >= 1) or "params" (ZeRO-Infinity:
            also the bf16 parameters, fetched before their all-gather; needs zero = 3).
        offload_device: where offloaded states live: "cpu" (DRAM) or "nvme".
        offload_activations: copy each micro-batch's stored activations to CPU DRAM after its
            forward and back before its backward.
        activation_offload_unit: how they travel: "stage" (a micro-batch's activations of a
            stage after its forward, on a copy stream beside compute, prefetched back) or
            "layer" (DeepSpeed's ``checkpoint_in_cpu``: each layer's checkpoint copied to the
            host right after the layer's forward and back before its backward, synchronously
            on the compute stream: :meth:`schedules.work.ModelWork.layer_offload_ops`).
        elementwise: element-wise kernels: "fused" (Megatron/TE), "eager" (one PyTorch op per
            kernel) or "auto" (fused for the megatron runtime, eager for torch).
        optimizer: the Adam kernel: "fused" (one pass over the states), "foreach" (torch's
            multi-tensor AdamW, a pass per elementary op) or "auto" (by runtime, as elementwise).
        selective_recompute: what recompute="selective" recomputes: "attention" (the attention
            core, Megatron) or "alternate-matmul" (every second forward matmul and the element-wise
            work, torchtitan's per-op SAC) or "layernorm-moe-act" (Megatron-Core
            ``--recompute-modules layernorm moe_act``: the pre-MLP norm and the experts'
            activation, :func:`schedules.layer_ops.recompute_ops`).
        zero3_unit: what ZeRO-3 gathers at once: a transformer "block" or each weight "module".
        fsdp_reshard_after_forward: framework="torch", ZeRO-3: which FSDP units free their gathered
            parameters after forward: "all" (the root too: the included trainer passes
            ``reshard_after_forward=True`` to every unit, which torch 2.13 applies to the root),
            "non-root" (FSDP's default: the root keeps them for the backward) or "torchtitan"
            (also the last block without PP, none with PP); see :mod:`schedules.passes.dp_torch`.
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
        tp_comm_overlap: with sequence parallelism, each TP all-gather / reduce-scatter runs beside
            the matmul it feeds or follows (Megatron-Core ``--tp-comm-overlap``, torch async TP).
        grad_reduce_dtype: what data-parallel gradient reductions carry: "fp32" (4 bytes per
            gradient: Megatron-LM with bf16, FSDP with ``reduce_dtype=fp32``), "compute" (the
            compute dtype) or "auto" (fp32 for the megatron runtime in bf16, else compute).
        ep: expert parallelism: the routed experts of each MoE layer are split over ``ep``
            ranks of the data-parallel group (innermost, Megatron-Core's rank order), which
            exchange tokens by all-to-all (:mod:`schedules.moe_ops`); must divide dp.
        etp: expert tensor parallelism: each expert's matrices split over ``etp`` ranks; must
            divide tp.
        moe_imbalance: routing imbalance: tokens the most loaded expert-parallel rank receives,
            as a multiple of the even share (>= 1.0; capped at ep and by the capacity factor).
        moe_overlap: dispatch/combine all-to-alls of one micro-batch run under another
            micro-batch's compute: "on", "off", or "auto" (on under DualPipeV, which exists
            for it); see :mod:`schedules.passes.ep_overlap`.
        moe_dispatcher: how tokens travel to their experts: "alltoall" (each of a token's top-k
            copies to its expert's rank, Megatron-Core's all-to-all dispatcher) or "deepep"
            (DeepEP's dispatch: one copy per destination node over the network, forwarded to
            the node's ranks over NVLink; :func:`sim.placement.deepep_volume`).
        dp_replicate: hybrid sharding (FSDP ``HYBRID_SHARD``, torchtitan
            ``data_parallel_replicate_degree``): the DP group splits into ``dp_replicate``
            replicas (outermost) of dp / dp_replicate ranks; ZeRO-3 shards the states and gathers
            the parameters inside a replica, and each gradient shard, reduce-scattered there, is
            then all-reduced across the replicas (:mod:`schedules.passes.dp_torch`). 1: plain
            FSDP over the whole DP group. Needs zero=3 and framework="torch".
        master_weights: the optimizer updates fp32 master copies of the parameters with fp32
            Adam states (Megatron, DeepSpeed, torchtitan's fp32 FSDP shards, the included
            trainer). False (torch runtime only): the parameters are stored in the compute dtype
            and are the optimizer's copy, and its states follow their dtype: NeMo AutoModel casts
            the model to bf16 (``initialize_weights`` -> ``self.to(bf16)``) and steps it with
            ``torch.optim.Adam``, whose ``exp_avg``/``exp_avg_sq`` are ``zeros_like(param)``.
        loss_dtype: the dtype the loss's softmax runs in: "fp32" (the logits are upcast: torch's
            ``logits.float()`` in torchtitan and the included trainer, Megatron's cross entropy)
            or "compute" (torch runtime only: ``F.cross_entropy`` on the bf16 logits, NeMo
            AutoModel's ``MaskedCrossEntropy(fp32_upcast=False)``).
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
        fp8_recipe: with ``dtype="fp8"``, how tensors are scaled and quantized: "delayed" (TE
            delayed scaling), "tensorwise" (dynamic per-tensor: torchao, TE current scaling),
            "rowwise" (torchao), "blockwise" (DeepSeek-V3 1x128/128x128), "mxfp8" (Blackwell).
        fp8_weight_cast: when the FP8 weight copy is made: once per "step" (cached across
            micro-batches), every "microbatch", or at every "use" (forward and backward).
        fp8_param_gather: ZeRO/FSDP all-gather the parameters in FP8 (torchao float8 all-gather,
            Megatron ``--fp8-param-gather``).
        fp8_bf16_layers: the first and the last this many blocks stay BF16.
        pipeline_p2p: how the megatron runtime's pipeline sends and receives meet the compute:
            "blocking" (each batched send/receive is waited for and followed by a device
            synchronize before the next action: Megatron-LM 2021 ``p2p_communication.py``,
            Megatron-Core's ``batch_p2p_sync``, DeepSpeed's pipeline engine), "async" (they run
            beside compute: Megatron-Core's ``--overlap-p2p-communication``), or "auto":
            blocking for the non-interleaved schedules (Megatron-Core: "non-interleaved schedule
            does not support overlapping p2p communication"), async otherwise. The torch runtime
            keeps torch pipelining's own waits.
        loss_allreduce, loss_nan_check, timer_syncs: what Megatron-LM does per micro-batch outside
            the model (:mod:`schedules.microbatch_syncs`): the last stage all-reduces the reported
            loss over the DP group; checks it for NaN with a host sync (Megatron-Core r0.8.0);
            its timers synchronize the device around every pass (Megatron-LM before Aug 2022).
        See :mod:`schedules.fp8` for the mechanics and :mod:`schedules.frameworks` for the stacks
        that make these choices.
    """

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    microbatch_size: int = 1
    global_batch: int = 1
    zero: int = 0
    sequence_parallel: bool = False
    recompute: str = "none"
    dtype: str = "bf16"
    schedule: str = "1f1b"
    flash_attention: bool = True
    attention_kernel: str = "flash2"
    dp_bucket_bytes: int = 40_000_000 * 2
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    uneven_stages: bool = False
    placement: tuple[str, ...] = ("tp", "cp", "dp", "pp")
    framework: str = "megatron"
    offload: str = "none"
    offload_device: str = "cpu"
    offload_activations: bool = False
    activation_offload_unit: str = "stage"
    elementwise: str = "auto"
    optimizer: str = "auto"
    selective_recompute: str = "attention"
    zero3_unit: str = "block"
    zero3_gather: str = "coalesced"
    zero3_max_live_params: float = 1e9
    zero3_max_reuse_distance: float = 1e9
    zero3_prefetch_bucket_params: float = 5e7
    tp_comm_overlap: bool = False
    grad_reduce_dtype: str = "auto"
    ep: int = 1
    etp: int = 1
    moe_imbalance: float = 1.0
    moe_overlap: str = "auto"
    moe_dispatcher: str = "alltoall"
    fsdp_reshard_after_forward: str = "all"
    dp_replicate: int = 1
    master_weights: bool = True
    loss_dtype: str = "fp32"
    grad_sync: str = "auto"
    fp8_recipe: str = "delayed"
    fp8_weight_cast: str = "step"
    fp8_param_gather: bool = False
    fp8_bf16_layers: int = 0
    pipeline_p2p: str = "auto"
    loss_allreduce: bool = False
    loss_nan_check: bool = False
    timer_syncs: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "vpp", "microbatch_size", "global_batch", "dp_bucket_bytes",
                     "ep", "etp", "dp_replicate"):
            require_positive_int(name, getattr(self, name))
        require_choice("zero", self.zero, (0, 1, 2, 3))
        require_choice("recompute", self.recompute, RECOMPUTE_KINDS)
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("schedule", self.schedule, SCHEDULE_NAMES)
        require_choice("framework", self.framework, FRAMEWORKS)
        require_choice("elementwise", self.elementwise, ELEMENTWISE_KINDS)
        require_choice("optimizer", self.optimizer, OPTIMIZER_KINDS)
        require_choice("selective_recompute", self.selective_recompute, SELECTIVE_KINDS)
        require_choice("zero3_unit", self.zero3_unit, ZERO3_UNITS)
        self._check_zero3_gather()
        require_choice("fsdp_reshard_after_forward", self.fsdp_reshard_after_forward, FSDP_RESHARD_KINDS)
        for name in ("zero3_max_live_params", "zero3_max_reuse_distance", "zero3_prefetch_bucket_params"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e18:
                raise invalid(name, value, "expected a number of parameters >= 0")
        for name in ("sequence_parallel", "flash_attention", "overlap_grad_reduce", "overlap_param_gather",
                     "uneven_stages", "tp_comm_overlap", "master_weights", "loss_allreduce", "loss_nan_check",
                     "timer_syncs"):
            if not isinstance(getattr(self, name), bool):  # "no" or 1 is not a boolean
                raise invalid(name, getattr(self, name), "expected true or false")
        require_choice("grad_reduce_dtype", self.grad_reduce_dtype, GRAD_REDUCE_DTYPES)
        require_choice("loss_dtype", self.loss_dtype, LOSS_DTYPES)
        if self.framework != Runtime.TORCH and not self.master_weights:
            raise invalid("master_weights", self.master_weights, "training without fp32 master weights is "
                          f"modelled for framework=torch only (got framework={self.framework})")
        if self.framework != Runtime.TORCH and self.loss_dtype != "fp32":
            raise invalid("loss_dtype", self.loss_dtype, "a loss in the compute dtype is modelled for "
                          f"framework=torch only (got framework={self.framework})")
        self._check_grad_sync()
        if not self.master_weights and self.offload != Offload.NONE:
            raise invalid("master_weights", self.master_weights, "offload moves fp32 optimizer states: "
                          "needs master_weights=true")
        require_choice("attention_kernel", self.attention_kernel, ATTENTION_KERNELS)
        if sorted(self.placement) != sorted(DIMENSIONS):
            raise invalid("placement", ",".join(self.placement), "a permutation of tp,cp,dp,pp")
        if self.global_batch % (self.dp * self.microbatch_size):
            raise invalid("global_batch", self.global_batch,
                          f"must be divisible by dp*microbatch_size = {self.dp * self.microbatch_size}")
        self._check_schedule()
        self._check_offload()
        self._check_experts()
        self._check_hybrid_sharding()
        self._check_fp8()

    def _check_fp8(self) -> None:
        require_choice("pipeline_p2p", self.pipeline_p2p, PIPELINE_P2P_KINDS)
        require_choice("fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        require_choice("fp8_weight_cast", self.fp8_weight_cast, FP8_WEIGHT_CASTS)
        if not isinstance(self.fp8_param_gather, bool):
            raise invalid("fp8_param_gather", self.fp8_param_gather, "expected true or false")
        if isinstance(self.fp8_bf16_layers, bool) or not isinstance(self.fp8_bf16_layers, int) \
                or not 0 <= self.fp8_bf16_layers < 10**6:
            raise invalid("fp8_bf16_layers", self.fp8_bf16_layers, "expected an integer >= 0")

    def _check_zero3_gather(self) -> None:
        require_choice("zero3_gather", self.zero3_gather, ZERO3_GATHERS)
        if self.zero3_gather == "per-param" and (self.zero3_unit != "module" or self.framework != Runtime.MEGATRON):
            raise invalid("zero3_gather", self.zero3_gather, "DeepSpeed's per-parameter collectives need "
                          f"zero3_unit=module and framework=megatron (got zero3_unit={self.zero3_unit}, "
                          f"framework={self.framework})")
        if self.zero3_gather == "per-param" and self.schedule in ("zb-h1", "interleaved-zb", *V_SCHEDULES):
            raise invalid("zero3_gather", self.zero3_gather, "DeepSpeed's per-parameter collectives are modelled "
                          f"with a whole backward (got schedule={self.schedule}, which splits it)")
        if self.zero3_gather == "per-param" and self.offload != Offload.NONE:
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
        require_choice("grad_sync", self.grad_sync, GRAD_SYNC_KINDS)
        if self.grad_sync == "auto":
            return
        if self.framework != Runtime.TORCH or self.zero < 2 or not self.overlap_grad_reduce:
            raise invalid("grad_sync", self.grad_sync, "FSDP's per-micro-batch reduction is modelled for "
                          "framework=torch with zero >= 2 and overlap_grad_reduce (got framework="
                          f"{self.framework}, zero={self.zero}, overlap_grad_reduce={self.overlap_grad_reduce})")

    def _check_experts(self) -> None:
        require_choice("moe_overlap", self.moe_overlap, MOE_OVERLAP_KINDS)
        require_choice("moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        imbalance = self.moe_imbalance
        if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float)) or not imbalance >= 1.0:
            raise invalid("moe_imbalance", imbalance, "expected a number >= 1.0 (1.0: even routing)")
        if self.dp % self.ep:
            raise invalid("ep", self.ep, f"must divide dp={self.dp} (experts are split inside the DP group)")
        if self.tp % self.etp:
            raise invalid("etp", self.etp, f"must divide tp={self.tp}")

    def _check_offload(self) -> None:
        require_choice("offload", self.offload, OFFLOAD_KINDS)
        require_choice("offload_device", self.offload_device, OFFLOAD_DEVICES)
        require_choice("offload_activations", self.offload_activations, (False, True))
        require_choice("activation_offload_unit", self.activation_offload_unit, ACTIVATION_OFFLOAD_UNITS)
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
        if self.offload != Offload.OPTIMIZER or self.zero < 2 or self.dp < 2 or self.offload_device != OffloadDevice.CPU \
                or self.offload_activations:
            raise invalid("offload", self.offload, "framework=torch models FSDP2's CPU offload only: "
                          "offload=optimizer with dp >= 2, zero 2 or 3, offload_device=cpu and no "
                          "activation offload")

    def _check_schedule(self) -> None:
        if self.schedule in INTERLEAVED_SCHEDULES and self.vpp < 2:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} needs vpp >= 2")
        if self.schedule in V_SCHEDULES and self.vpp != 2:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} runs exactly 2 chunks per rank (vpp=2)")
        if self.vpp > 1 and self.schedule in SINGLE_CHUNK_SCHEDULES:
            raise invalid("vpp", self.vpp, f"vpp > 1 needs an interleaved or V schedule, not {self.schedule}")

    @property
    def world_size(self) -> int:
        """GPUs used: tp * cp * pp * dp."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp * microbatch_size)."""
        return self.global_batch // (self.dp * self.microbatch_size)

    @property
    def blocking_p2p(self) -> bool:
        """The megatron runtime's pipeline sends and receives block the compute (``pipeline_p2p``)."""
        if self.framework != Runtime.MEGATRON or self.pipeline_p2p == "async":
            return False
        return self.pipeline_p2p == "blocking" or self.schedule in ("gpipe", "1f1b")

    @property
    def compute_dtype(self) -> str:
        """The dtype everything but an FP8 plan's quantized GEMMs computes in: bf16 under fp8
        (attention, norms, activations, the logits stay bf16: :mod:`schedules.fp8`), else ``dtype``."""
        return "bf16" if self.dtype == "fp8" else self.dtype

    @property
    def element_bytes(self) -> int:
        """Bytes of one activation, gradient or communicated parameter element (4 for fp32, else 2)."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def param_gather_bytes(self) -> int:
        """Bytes per parameter a ZeRO/FSDP parameter all-gather carries: 1 when an FP8 plan gathers
        FP8 parameters (``fp8_param_gather``), else :attr:`element_bytes`."""
        return 1 if self.dtype == "fp8" and self.fp8_param_gather else self.element_bytes

    @property
    def loss_element_bytes(self) -> int:
        """Bytes of one logit element as the loss's softmax reads it (``loss_dtype``)."""
        return 4 if self.loss_dtype == "fp32" else self.element_bytes

    @property
    def grad_reduce_bytes(self) -> int:
        """Bytes per gradient element in data-parallel reductions (``grad_reduce_dtype``)."""
        fp32 = self.grad_reduce_dtype == "fp32" or (self.grad_reduce_dtype == "auto" and self.framework == Runtime.MEGATRON
                                                   and self.compute_dtype == "bf16")
        return 4 if fp32 else self.element_bytes

    @property
    def activation_copies(self) -> str:
        """How activations travel to the host: "none", "stage" or "layer"
        (``offload_activations`` with its ``activation_offload_unit``)."""
        return self.activation_offload_unit if self.offload_activations else "none"

    @property
    def fused_elementwise(self) -> bool:
        """Element-wise work runs as fused kernels (``elementwise``, "auto": the megatron runtime)."""
        return self.elementwise == "fused" or (self.elementwise == "auto" and self.framework == Runtime.MEGATRON)

    @property
    def fused_optimizer(self) -> bool:
        """Adam runs as one fused kernel (``optimizer``, "auto": the megatron runtime)."""
        return self.optimizer == "fused" or (self.optimizer == "auto" and self.framework == Runtime.MEGATRON)

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
    def hybrid(self) -> bool:
        """Hybrid sharding: states sharded inside a replica, gradients all-reduced across replicas."""
        return self.dp_replicate > 1

    @property
    def shard_dim(self) -> CommGroup:
        """The group ZeRO shards over: the DP x CP group, or under hybrid sharding one replica's
        ranks (:mod:`sim.hybrid_groups`)."""
        return CommGroup.hybrid(Axis.DP_SHARD, self.dp_replicate) if self.hybrid else DP

    @property
    def replicate_dim(self) -> CommGroup:
        """The group across replicas under hybrid sharding."""
        return CommGroup.hybrid(Axis.DP_REPLICATE, self.dp_replicate)

    @property
    def num_chunks(self) -> int:
        """Model chunks per pipeline rank (1 unless interleaved/V)."""
        return self.vpp


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
    _check_moe_plan(model, plan)
    if plan.schedule == "interleaved-megatron" and plan.pp > 1 and plan.num_microbatches % plan.pp:
        raise invalid("global_batch", plan.global_batch,
                      f"interleaved needs micro-batches ({plan.num_microbatches}) divisible by pp={plan.pp}")
    if plan.schedule in TORCH_INTERLEAVED_SCHEDULES and plan.pp > 1:
        interleave_group(plan.pp, plan.num_microbatches, plan.schedule)  # torch's rounds rule


def _check_moe_plan(model: ModelSpec, plan: ParallelPlan) -> None:
    """Expert-parallel fields against the model (one-line errors)."""
    moe = model.moe
    if moe is not None and plan.per_param_zero3:
        raise invalid("zero3_gather", plan.zero3_gather, f"DeepSpeed's per-parameter collectives are modelled for "
                      f"dense models (model {model.name!r} has experts)")
    if moe is None:
        if plan.ep > 1 or plan.etp > 1:
            field, value = ("ep", plan.ep) if plan.ep > 1 else ("etp", plan.etp)
            raise invalid(field, value, f"model {model.name!r} is dense (no experts): expert parallelism needs "
                          "an MoE model")
        return
    if moe.num_experts % plan.ep:
        raise invalid("ep", plan.ep, f"must divide the model's num_experts={moe.num_experts}")
    if moe.expert_ffn_size % plan.etp:
        raise invalid("etp", plan.etp, f"must divide the expert FFN size {moe.expert_ffn_size}")
    if plan.tp > 1 and not plan.sequence_parallel and plan.framework == Runtime.MEGATRON:
        raise invalid("sequence_parallel", False, "an MoE model with tp > 1 needs sequence parallelism "
                      "(Megatron-Core's MoE layers require it)")


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
