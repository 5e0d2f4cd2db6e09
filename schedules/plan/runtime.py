"""The plan's runtime and kernels: whose pipeline and data-parallel runtime runs the step, which
kernels it uses, what it recomputes and how its communication meets the compute.

Attributes of :class:`RuntimeKernels`:
    framework: whose runtime is modelled: "megatron" (Megatron-LM/DeepSpeed: DDP or the
        distributed optimizer, eager pipeline sends) or "torch" (the included trainer: FSDP2
        ``fully_shard``/``replicate`` units per block, ZeRO-1 by broadcasts, and
        ``torch.distributed.pipelining``'s posted receives and send waits); see
        :mod:`schedules.passes.dp_torch` and :mod:`schedules.passes.p2p_torch`.
    recompute: activation recomputation: none | selective | full.
    selective_recompute: what recompute="selective" recomputes: "attention" (the attention
        core, Megatron) or "alternate-matmul" (every second forward matmul and the element-wise
        work, torchtitan's per-op SAC) or "layernorm-moe-act" (Megatron-Core
        ``--recompute-modules layernorm moe_act``: the pre-MLP norm and the experts'
        activation, :func:`schedules.layer_ops.recompute_ops`).
    flash_attention: attention kernel that never stores the s x s matrix.
    attention_kernel: which flash kernel: "flash2" (FlashAttention-2, the device's measured
        rate) or "triton" (FlashAttention in Triton, slower per pass:
        :mod:`schedules.attention_kernels`); unused without flash attention.
    elementwise: element-wise kernels: "fused" (Megatron/TE), "eager" (one PyTorch op per
        kernel) or "auto" (fused for the megatron runtime, eager for torch).
    optimizer: the Adam kernel: "fused" (one pass over the states), "foreach" (torch's
        multi-tensor AdamW, a pass per elementary op) or "auto" (by runtime, as elementwise).
    tp_comm_overlap: with sequence parallelism, each TP all-gather / reduce-scatter runs beside
        the matmul it feeds or follows (Megatron-Core ``--tp-comm-overlap``, torch async TP).
    pipeline_p2p: how the megatron runtime's pipeline sends and receives meet the compute:
        "blocking" (each batched send/receive is waited for and followed by a device
        synchronize before the next action: Megatron-LM 2021 ``p2p_communication.py``,
        Megatron-Core's ``batch_p2p_sync``, DeepSpeed's pipeline engine), "async" (they run
        beside compute: Megatron-Core's ``--overlap-p2p-communication``), or "auto":
        blocking for the non-interleaved schedules (Megatron-Core: "non-interleaved schedule
        does not support overlapping p2p communication"), async otherwise. The torch runtime
        keeps torch pipelining's own waits. Blocking one-chunk schedules post a receive before
        the action that needs it; blocking interleaved 1F1B runs Megatron-LM's lock-step (each
        loop iteration's sends and the next iteration's receives in one waited batch:
        schedules.py @fda81a212b l.228-350; :func:`schedules.passes.p2p_torch.megatron_iterations`).
        Megatron-Core's training CLI overlaps the interleaved P2P by default
        (``--no-overlap-p2p-communication`` is store_false, core_v0.8.0 arguments.py l.1405),
        hence auto; the other multi-chunk schedules have no blocking form and refuse it.
    pipeline_scatter_gather: Megatron-LM's scatter/gather of pipeline messages (Narayanan et al.
        2021, sec. 4.1): with blocking P2P, tp > 1 and no sequence parallelism, each TP rank sends
        1/tp of the activation (or gradient) and the receiver all-gathers the pieces over TP on
        the compute stream after the batched receive and its device synchronize. On by default
        in Megatron-LM's legacy ``p2p_communication.py`` (fda81a212b l.51-55, 71-77, 115-122;
        285068c810 l.148-195, 238-245, skipped with sequence parallelism; since 72e4230bb5,
        2021-02-16); Megatron-Core's P2P has none. Set by the megatron-2021/2023 presets.
    device_connections: CUDA_DEVICE_MAX_CONNECTIONS, the hardware work queues from the host to
        each GPU: "1" (one queue: each rank's kernels start in the order the host issued them,
        across streams, :mod:`sim.device_queue`), "many" (CUDA's default of 8: streams run
        independently; the default) or "auto": one queue for the megatron runtime with tp > 1 or
        cp > 1 on a GPU before Blackwell (compute capability < 10.0), as Megatron-LM asserts
        (arguments.py@d98e8a6 l.1451-1479; NeMo-Framework-Launcher#451 sets it the same way), else
        many. What the stacks ran with: Megatron-LM from bdd9731288 (2022-10-14) to Megatron-Core
        r0.11 raises unless it is "1" with sequence parallelism or the asynchronous TP all-reduce,
        which is on by default at any TP (r0.8.0 arguments.py l.476-484), so Megatron-Core r0.8.0
        runs used "1" even at TP 1; Megatron-LM 2021 (fda81a212b) does not check it; FSDP wants
        more than one (Megatron-LM asserts it under FSDP, arguments.py@d98e8a6 l.1048-1049;
        verl-project/verl#6976). Opt-in, not set by the framework presets: with "1" for the
        megatron-core preset's runs, validate --published moves the Megatron-Core H100 rows from
        -12.8..+5.9% to -12.8..+33.5% (runs.toml MAPE 6.5% -> 8.1%): their pipeline stages wait
        for the parameter all-gathers that the forward pre-hooks launch one bucket at a time
        (Megatron-Core r0.8.0 distrib_optimizer.py l.1331-1337, 1468-1473), more than the
        measured steps allow, so something else in that path is still too slow.
    grad_accumulation: how a micro-batch's weight gradients join the step's earlier ones: "fused"
        (Megatron-LM's ``gradient_accumulation_fusion``: the weight-gradient GEMM writes the fp32
        ``main_grad`` with beta = 1, no extra kernel), "autograd" (eager autograd's
        ``AccumulateGrad``, ``grad += new`` in the compute dtype from the second micro-batch on),
        "fp32-copy" (DeepSpeed's ``BF16_Optimizer``: after every micro-batch's backward each bf16
        gradient is cast to fp32 and added into an fp32 buffer, ``update_hp_grads``,
        deepspeed/runtime/bf16_optimizer.py @v0.6.5 l.390-407, called by the pipeline engine's
        ``_exec_backward_pass`` l.778-780 and by ``BF16_Optimizer.backward``) or "auto" (fused for
        the megatron runtime, autograd for torch). :meth:`schedules.work.Work.grad_accumulate_ops`.
    bias_grad: how a linear's bias gradient is computed: "reduction" (a kernel of its own summing
        the output gradient over the tokens: PyTorch's linears, Megatron-LM's own), "epilogue"
        (in the weight-gradient GEMM: Transformer Engine) or "auto" (by runtime and precision):
        :mod:`schedules.bias_grads`.
    activation_layout: the order of a block's activation dimensions, which decides what its
        sequence-parallel collectives copy: "sbh" (Megatron's [seq, batch, hidden]: they gather and
        scatter dim 0 in place; the default), "bsh" (DTensor's [batch, seq, hidden], as torchtitan
        shards it: PyTorch's functional collectives re-concatenate an all-gather's result along
        the sequence and concatenate a reduce-scatter's input chunks, a copy of the full
        activation each) or "bsh-view" (the same with PyTorch from 2025-12, whose all-gather result
        is a view for a micro-batch of one sequence): :func:`schedules.layer_comm.beside`.
    grad_nan_check, average_in_collective: what the stack does to a DP gradient bucket before reducing
        it (:mod:`schedules.grad_bucket_ops`).
    loss_allreduce, loss_nan_check, timer_syncs: what Megatron-LM does per micro-batch outside
        the model (:mod:`schedules.microbatch_syncs`): the last stage all-reduces the reported
        loss over the DP group; checks it for NaN with a host sync (Megatron-Core r0.8.0);
        its timers synchronize the device around every pass (Megatron-LM before Aug 2022).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from core.errors import invalid
from core.settings import BOOLEAN, check_declared, choice, setting
from core.vocab import Runtime
from schedules.attention_kernels import ATTENTION_KERNELS

FRAMEWORKS = tuple(Runtime)
RECOMPUTE_KINDS = ("none", "selective", "full")
SELECTIVE_KINDS = ("attention", "alternate-matmul", "layernorm-moe-act")
ELEMENTWISE_KINDS = ("auto", "fused", "eager")
OPTIMIZER_KINDS = ("auto", "fused", "foreach")
PIPELINE_P2P_KINDS = ("auto", "async", "blocking")
DEVICE_CONNECTIONS = ("auto", "1", "many")
GRAD_ACCUMULATION_KINDS = ("auto", "fused", "autograd", "fp32-copy")
BIAS_GRAD_KINDS = ("auto", "reduction", "epilogue")
ACTIVATION_LAYOUTS = ("sbh", "bsh", "bsh-view")
BLACKWELL_CC = 100
"""Compute capability (x10) from which Megatron-LM no longer asks for one connection: "CUDA_DEVICE_MAX_CONNECTIONS
requirement no longer exists since the Blackwell architecture" (arguments.py@d98e8a6 l.1455)."""
FUSED_PROJECTIONS: Mapping[str, bool] = MappingProxyType({Runtime.MEGATRON: True, Runtime.TORCH: False})
"""Whether a runtime runs the attention's q, k, v projections as one matmul and SwiGLU's gate
and up projections as one: Megatron-LM / Transformer Engine do (``linear_qkv``,
``linear_fc1`` of twice the width); the included trainer keeps ``wq``, ``wk``, ``wv`` and
``w1``, ``w3`` separate (``profiler/trainer/model.py``), as torchtitan's Llama does."""


@dataclass(frozen=True, kw_only=True)
class RuntimeKernels:
    """The runtime, its kernels, recomputation and communication overlap (see the module docstring)."""

    framework: str = setting("megatron", rule=choice(FRAMEWORKS), flag="--runtime",
                             help="pipeline/DP runtime modelled: megatron (default) or torch")
    recompute: str = setting("none", rule=choice(RECOMPUTE_KINDS),
                             help="activation recomputation: none keeps every activation; full keeps each layer's "
                                  "input and redoes its whole forward in the backward; selective redoes only what "
                                  "--selective-recompute names (attention: the s x s attention core, nothing with "
                                  "flash attention; alternate-matmul: every second matmul and the element-wise work; "
                                  "layernorm-moe-act: an MoE layer's pre-MLP norm and experts' activation)")
    selective_recompute: str = setting("attention", rule=choice(SELECTIVE_KINDS),
                                       help="what --recompute selective recomputes")
    flash_attention: bool = setting(True, rule=BOOLEAN,
                                    help="fused attention that never stores the s x s scores (default on)")
    attention_kernel: str = setting("flash2", rule=choice(ATTENTION_KERNELS),
                                    help="the fused attention kernel: flash2 (FlashAttention-2, default) or triton "
                                         "(FlashAttention in Triton: 1.3x slower forward, 2x slower backward, "
                                         "Dao 2023 sec. 4.1)")
    elementwise: str = setting("auto", rule=choice(ELEMENTWISE_KINDS), help="element-wise kernels (auto: by runtime)")
    optimizer: str = setting("auto", rule=choice(OPTIMIZER_KINDS), help="Adam kernel (auto: by runtime)")
    tp_comm_overlap: bool = setting(False, rule=BOOLEAN,
                                    help="overlap sequence-parallel TP collectives with the adjacent matmuls")
    pipeline_p2p: str = setting("auto", rule=choice(PIPELINE_P2P_KINDS),
                                help="megatron runtime: pipeline sends/receives block the compute (blocking: a "
                                     "batched send/receive then a device synchronize; interleaved: once per loop iteration, in "
                                     "lock-step), run beside it (async), or "
                                     "auto (blocking unless interleaved)")
    pipeline_scatter_gather: bool = setting(
        False, rule=BOOLEAN,
        help="megatron runtime, blocking P2P, tp > 1 without sequence parallelism: each TP rank sends 1/tp of a "
             "pipeline message and the receiver all-gathers it over TP (Megatron-LM's legacy scatter/gather)",
        source="Megatron-LM megatron/p2p_communication.py @fda81a212b l.51-55, 71-77, 115-122 (on by default since "
               "72e4230bb5, 2021-02-16); @285068c810 l.148-195, 238-245 (not with sequence parallelism); "
               "Megatron-Core's pipeline_parallel/p2p_communication.py has none")
    device_connections: str = setting("many", rule=choice(DEVICE_CONNECTIONS),
                                      help="CUDA_DEVICE_MAX_CONNECTIONS: 1 (one hardware queue per GPU: kernels "
                                           "start in the host's issue order across streams, so a kernel issued "
                                           "after a queued collective waits for it to start), many (default: "
                                           "streams run independently) or auto (1 for the megatron runtime with tp "
                                           "or cp > 1 before Blackwell, as Megatron-LM asserts; else many)",
                                      source="Megatron-LM megatron/training/arguments.py@d98e8a6 l.1451-1479 "
                                             "(tp or cp > 1 and arch < 10 asserts CUDA_DEVICE_MAX_CONNECTIONS == "
                                             "'1'); NVIDIA/Megatron-LM#533, #1468; alibaba/Megatron-LLaMA#26")
    grad_accumulation: str = setting("auto", rule=choice(GRAD_ACCUMULATION_KINDS),
                                     help="how micro-batch weight gradients accumulate: fused into the weight-gradient "
                                          "GEMM (Megatron), autograd (grad += new from the second micro-batch), "
                                          "fp32-copy (DeepSpeed BF16_Optimizer: cast to fp32 and add after every "
                                          "backward) or auto (fused for megatron, autograd for torch)",
                                     source="Megatron-LM gradient_accumulation_fusion; DeepSpeed "
                                            "deepspeed/runtime/bf16_optimizer.py@v0.6.5 update_hp_grads l.390-407")
    bias_grad: str = setting("auto", rule=choice(BIAS_GRAD_KINDS),
                             help="a linear's bias gradient: reduction (a kernel summing the output gradient over "
                                  "the tokens: PyTorch's and Megatron-LM's own linears), epilogue (in the "
                                  "weight-gradient GEMM: Transformer Engine) or auto (reduction on the torch runtime "
                                  "outside FP8, else epilogue)",
                             source="PyTorch autograd sum_to for addmm's broadcast bias; Megatron-LM "
                                    "megatron/core/tensor_parallel/layers.py grad_output.sum(dim=0); TransformerEngine "
                                    "pytorch/module/linear.py gemm(..., grad=True, use_bias=ctx.use_bias)")
    activation_layout: str = setting("sbh", rule=choice(ACTIVATION_LAYOUTS),
                                     help="activation dimension order for sequence-parallel collectives: sbh "
                                          "(Megatron, in place; default), bsh (DTensor/torchtitan: the all-gather's "
                                          "result and the reduce-scatter's input copied by a cat) or bsh-view (the "
                                          "same, PyTorch from 2025-12: no all-gather copy for one sequence)",
                                     source="PyTorch torch/distributed/_functional_collectives.py all_gather_tensor / "
                                            "reduce_scatter_tensor (chunk + cat for a non-zero dim; #96226, #113324, "
                                            "#169404)")
    loss_allreduce: bool = setting(False, rule=BOOLEAN, help="megatron: the last stage all-reduces each "
                                   "micro-batch's reported loss over DP",
                                   source="Megatron-LM 2021 loss_func @fda81a212b; Megatron-Core r0.8.0 "
                                          "pretrain_gpt.py l.144-145")
    loss_nan_check: bool = setting(False, rule=BOOLEAN, help="megatron: a host sync per micro-batch checks the "
                                   "loss for NaN (Megatron-Core)",
                                   source="Megatron-Core r0.8.0 pretrain_gpt.py l.136-141")
    timer_syncs: bool = setting(False, rule=BOOLEAN, help="megatron: timers synchronize the device around every "
                                "pass (Megatron-LM before Aug 2022)",
                                source="Megatron-LM timers before 77efcccb93 (2022-08-10)")
    grad_nan_check: bool = setting(False, rule=BOOLEAN, help="megatron: each DP gradient bucket's norm is "
                                   "checked for NaN on the host before its reduction",
                                   source="Megatron-Core r0.8.0 distributed/param_and_grad_buffer.py "
                                          "Bucket.start_grad_sync (check_for_nan_in_grad)")
    average_in_collective: bool = setting(False, rule=BOOLEAN, help="megatron: the DP collective averages the "
                                          "gradients; otherwise each bucket is first scaled by 1/DP in a pass of "
                                          "its own",
                                          source="Megatron-Core r0.8.0 --ddp-average-in-collective (off by "
                                                 "default); NeMo recipes set it")

    def __post_init__(self) -> None:
        check_declared(self, invalid)

    @property
    def fused_elementwise(self) -> bool:
        """Element-wise work runs as fused kernels (``elementwise``, "auto": the megatron runtime)."""
        return self.elementwise == "fused" or (self.elementwise == "auto" and self.framework == Runtime.MEGATRON)

    @property
    def grad_accumulation_kind(self) -> str:
        """``grad_accumulation`` with "auto" resolved: fused for the megatron runtime, autograd for torch."""
        if self.grad_accumulation != "auto":
            return self.grad_accumulation
        return "fused" if self.framework == Runtime.MEGATRON else "autograd"

    def accumulates_gradients(self, stored: bool) -> bool:
        """Does a block's gradient pass add an op for accumulating its gradients
        (``grad_accumulation_kind``; ``stored``: earlier micro-batches of the step produced them)?
        Never when fused into the GEMM, from the second micro-batch on for autograd, every time
        for DeepSpeed's fp32 copies."""
        kind = self.grad_accumulation_kind
        return kind == "fp32-copy" or (kind == "autograd" and stored)

    @property
    def fused_optimizer(self) -> bool:
        """Adam runs as one fused kernel (``optimizer``, "auto": the megatron runtime)."""
        return self.optimizer == "fused" or (self.optimizer == "auto" and self.framework == Runtime.MEGATRON)
