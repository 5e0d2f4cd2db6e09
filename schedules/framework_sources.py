"""Where each framework preset's choices are documented: per plan setting, the source (code at a
commit, a documented default, a paper) that the preset's value rests on. One dict per stack;
:mod:`schedules.frameworks` builds the presets from them, and a preset's every choice must name
its source there.
"""

from __future__ import annotations

MEGATRON_CORE_SRC = {
    "framework": "Megatron-LM pipeline schedules (megatron/core/pipeline_parallel/schedules.py)",
    "flash_attention": "Transformer Engine fused attention (cuDNN flash attention) in Megatron-Core",
    "attention_kernel": "Transformer Engine's fused attention, priced at the device's measured "
                        "FlashAttention-2 rate (no separate cuDNN figure in the facts); unused without flash",
    "overlap_grad_reduce": "--overlap-grad-reduce (Megatron-Core distributed data parallel, default in "
                           "NeMo and the Megatron-LM README's H100 scaling runs)",
    "overlap_param_gather": "--overlap-param-gather with the distributed optimizer",
    "delay_grad_reduce": "Megatron-Core r0.8.0: --no-delay-grad-reduce is store_false (default on: 'delay / "
                         "synchronize grad reductions in all but first PP stage', arguments.py l.1422-1424); the "
                         "1F1B schedule enables the reduction in the last backward only on pipeline rank 0 and "
                         "calls grad_sync_func after the cool-down elsewhere (pipeline_parallel/schedules.py "
                         "l.1483-1506); align_grad_reduce defaults on at d98e8a6 (config/common_config.py l.80)",
    "elementwise": "Transformer Engine / Apex fused norm, bias-GeLU/SwiGLU and bias-dropout-add kernels",
    "optimizer": "Apex/TE FusedAdam over fp32 main params (multi_tensor_adam)",
    "selective_recompute": "--recompute-granularity selective recomputes the core attention "
                           "(Korthikanti et al. 2022, Megatron-LM arguments)",
    "zero3_unit": "not used (Megatron shards optimizer states only)",
    "zero3_gather": "not used (no ZeRO-3 submodule fetches)",
    "loss_allreduce": "Megatron-Core r0.8.0 pretrain_gpt.py loss_func l.144-145: reporting_loss all-reduced over "
                      "the DP group in every micro-batch",
    "loss_nan_check": "Megatron-Core r0.8.0 pretrain_gpt.py l.136-141: assert not loss[0].isnan() with "
                      "--check-for-nan-in-loss-and-grad, on by default (arguments.py: store_false)",
    "timer_syncs": "off since 'Timing levels' (Megatron-LM 77efcccb93, 2022-08-10): --timing-log-level 0 by default, "
                   "no torch.cuda.synchronize in the timers",
    "grad_nan_check": "Megatron-Core r0.8.0: --check-for-nan-in-loss-and-grad (default on) sets DDP's "
                      "check_for_nan_in_grad: grad_data.norm(p=2) and a host isnan check per bucket "
                      "(distributed/param_and_grad_buffer.py start_grad_sync)",
    "average_in_collective": "Megatron-Core r0.8.0: --ddp-average-in-collective is store_true (off): each bucket "
                             "is scaled by 1/DP (grad_data *= gradient_scaling_factor) before the collective",
    "tp_comm_overlap": "--tp-comm-overlap (Transformer Engine userbuffers), on in the Megatron-LM README's "
                       "H100 scaling runs (Megatron-Core r0.8.0)",
    "grad_reduce_dtype": "megatron/training/arguments.py: 'bfloat16 requires gradient accumulation and "
                        "all-reduce to be done in fp32' (accumulate_allreduce_grads_in_fp32 = True with --bf16)",
    "activation_offload_unit": "trainsim's own model of activation offload (a stage's activations per "
                               "micro-batch on a copy stream); the stack's offload is not modelled apart",
    "fsdp_reshard_after_forward": "not used (no FSDP units)",
    "fp8_recipe": "Megatron-Core TransformerConfig fp8_recipe defaults to 'delayed' (TE DelayedScaling; "
                  "megatron/core/transformer/transformer_config.py)",
    "fp8_weight_cast": "the pipeline schedules call set_is_first_microbatch, so TE casts each weight once per step "
                       "and caches it across micro-batches (megatron/core/pipeline_parallel/schedules.py, "
                       "extensions/transformer_engine.py)",
    "fp8_param_gather": "--fp8-param-gather is off by default (fp8_param = False)",
    "loss_dtype": "Megatron's vocab-parallel cross entropy upcasts the logits to fp32 "
                  "(megatron/core/tensor_parallel/cross_entropy.py: vocab_parallel_logits.float())",
    "pipeline_p2p": "Megatron-Core r0.8.0: batch_p2p_comm and batch_p2p_sync (a torch.cuda.synchronize after "
                    "each batched send/receive) unless --overlap-p2p-communication, which only the interleaved "
                    "schedule supports (p2p_communication.py, model_parallel_config.py, arguments.py)",
}
FSDP2_SRC = {
    "framework": "PyTorch FSDP2 fully_shard per transformer block (torchtitan parallelize_llama.py)",
    "zero": "fully_shard shards parameters, gradients and optimizer states over the DP group (ZeRO-3)",
    "flash_attention": "F.scaled_dot_product_attention selects FlashAttention-2 on A100/H100 (torchtitan Llama)",
    "attention_kernel": "SDPA's FlashAttention-2 backend",
    "overlap_grad_reduce": "FSDP reduce-scatters each unit's gradients in its post-backward hook",
    "overlap_param_gather": "FSDP2 prefetches the next unit's all-gather (implicit prefetching)",
    "elementwise": "eager PyTorch ops (RMSNorm, SiLU, RoPE) without torch.compile",
    "optimizer": "torch.optim.AdamW(foreach=True) (torchtitan optimizer.implementation default "
                 "'foreach' in 2024)",
    "selective_recompute": "torchtitan activation_checkpoint mode 'selective', option 'op': saves "
                           "matmul outputs except every second mm (parallelize_llama.py _save_list)",
    "zero3_unit": "one FSDP unit per transformer block",
    "zero3_gather": "not used (FSDP gathers a unit's flat parameter in one call)",
    "loss_allreduce": "torchtitan reduces the loss for logging at its log steps only (dist_mean), not per micro-batch",
    "loss_nan_check": "no per-micro-batch NaN check",
    "timer_syncs": "no device-synchronizing timers",
    "tp_comm_overlap": "torchtitan enables async TP only when asked (experimental.enable_async_tensor_parallel)",
    "grad_reduce_dtype": "FSDP2 MixedPrecisionPolicy(reduce_dtype=None) reduces in the compute dtype",
    "activation_offload_unit": "trainsim's own model of activation offload (a stage's activations per "
                               "micro-batch on a copy stream); torch's save_on_cpu is not modelled apart",
    "fsdp_reshard_after_forward": "FSDP keeps the root's parameters after forward: FSDP2 FSDPState._lazy_init "
                                  "(torch/distributed/_composable/fsdp/_fsdp_state.py@005da465: the root's "
                                  "post_forward_mesh_info = None), FSDP1 _post_forward_reshard (not state._is_root)",
    "fp8_recipe": "torchao.float8 Float8LinearConfig() defaults to dynamic tensorwise scaling (torchao/float8/config.py)",
    "fp8_weight_cast": "torchao Float8Linear casts the weight inside every forward and backward call and saves the "
                       "BF16 weight (torchao/float8/float8_linear.py); its weight cache was removed "
                       "(float8_experimental dd0c596: does not compose with FSDP + compile)",
    "fp8_param_gather": "torchao enable_fsdp_float8_all_gather defaults to False (torchtitan's tomls keep it off)",
    "loss_dtype": "torchtitan's cross entropy runs on logits.float() (torchtitan/components/loss.py)",
    "pipeline_p2p": "not used: the torch runtime keeps torch.distributed.pipelining's own send waits "
                    "(schedules/passes/p2p_torch.py)",
}
TORCHTITAN_SRC = {
    **FSDP2_SRC,
    "zero": "torchtitan parallelism.data_parallel_shard_degree defaults to -1: FSDP over every DP rank "
            "(config_manager.py / job_config.py)",
    "grad_reduce_dtype": "torchtitan training.mixed_precision_reduce defaults to 'float32' "
                        "(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32))",
    "fsdp_reshard_after_forward": "torchtitan apply_fsdp (parallelisms/parallelize_llama.py@9dec370): without PP "
                                  "reshard_after_forward = int(layer_id) < len(model.layers) - 1 (the last block "
                                  "is kept), with PP False for every block and the root; FSDP keeps the root",
    "activation_layout": "torchtitan's activations are [batch, seq, hidden] and its sequence parallelism shards dim 1 "
                         "(apply_tp: SequenceParallel norms, Shard(1) between blocks); DTensor redistributes with "
                         "PyTorch's functional collectives, whose all_gather_tensor / reduce_scatter_tensor on a "
                         "non-zero dim chunk and cat the full tensor (torch/distributed/_functional_collectives.py, "
                         "#96226 and #113324, 2023); the published runs (2024-25) predate the all-gather's view for one "
                         "sequence (#169404, 2025-12)",
    "sequence_parallel": "torchtitan apply_tp (parallelisms/parallelize_llama.py@9dec370 l.117-191: 'Apply tensor + "
                         "sequence parallelism to every transformer block', SequenceParallel norms and Shard(1) "
                         "activations between blocks): its TP has no form without SP until aa68af18e (2026-03-29), "
                         "whose enable_sequence_parallel defaults to True; at TP 1 it changes nothing",
}


DEEPSPEED_SRC = {**MEGATRON_CORE_SRC,
                  "grad_nan_check": "DeepSpeed checks overflow in the optimizer step, not each bucket before its "
                                    "reduction",
                  "average_in_collective": "DeepSpeed v0.6.2 engine.py allreduce_bucket: tensor_to_allreduce.mul_(1. "
                                           "/ world_size) before the all-reduce (the pipeline engine's ReduceGrads)",
    "framework": "Megatron-DeepSpeed: Megatron-LM's model and schedules with DeepSpeed ZeRO",
    "activation_offload_unit": "DeepSpeed CPU checkpointing (checkpoint_in_cpu, "
                               "deepspeed/runtime/activation_checkpointing/checkpointing.py "
                               "@v0.6.2): CheckpointFunction.forward copies each checkpointed "
                               "layer's inputs to the CPU (copy_to_device, a blocking .to) and "
                               "backward moves them back (move_to_device) before the "
                               "recomputation; Megatron-DeepSpeed checkpoints every layer "
                               "(--checkpoint-num-layers 1)",
    "flash_attention": "Megatron-DeepSpeed GPT of 2021-22 uses unfused attention",
    "overlap_grad_reduce": "DeepSpeed overlap_comm reduces gradient buckets during backward",
    "optimizer": "DeepSpeed FusedAdam",
    "zero3_unit": "DeepSpeed ZeRO-3 fetches each submodule's parameters "
                  "(all_gather_coalesced per module, stage3.py fetch_sub_module)",
    "zero3_gather": "DeepSpeed v0.6.2 gathers a submodule's parameters with one all_gather_coalesced "
                    "(_all_gather_base into one flat buffer, partition_parameters.py) without a device synchronize",
    "loss_allreduce": "Megatron-DeepSpeed's loss_func (a 2021 Megatron-LM fork) is not read here: not modelled",
    "loss_nan_check": "no NaN check in Megatron-DeepSpeed's loss_func of that era (not read: not modelled)",
    "timer_syncs": "Megatron-DeepSpeed's timers are not read here: not modelled",
    "tp_comm_overlap": "Megatron-DeepSpeed runs TP collectives in sequence",
    "pipeline_p2p": "DeepSpeed's PipelineEngine runs its SendActivation/RecvActivation "
                    "instructions in order with blocking p2p.send/recv "
                    "(deepspeed/runtime/pipe/engine.py, p2p.py)",
    "pipeline_scatter_gather": "DeepSpeed's PipelineEngine partitions pipeline messages over TP: "
                               "is_pipe_partitioned = is_grad_partitioned = is_model_parallel (TP > 1; "
                               "deepspeed/runtime/pipe/engine.py from v0.3 on): a stage sends 1/TP of its output and "
                               "of its input gradient as a PartitionedTensor and the receiver all-gathers it over the "
                               "slice-parallel group (PartitionedTensor.full) before using it; the backward's "
                               "all-gather that restores the stage's own output is not modelled",
    "grad_reduce_dtype": "DeepSpeed ZeRO communicates gradients in the model's dtype "
                        "(communication_data_type unset)",
    "bias_grad": "Megatron-DeepSpeed's model is Megatron-LM's of 2021-22 (megatron/mpu/layers.py): its linears' bias "
                 "gradients are sums of the output gradient over the tokens (autograd's, or grad_output.sum(dim=0))"}
DEEPSPEED_2021_SRC = {
    **DEEPSPEED_SRC,
    "framework": "Megatron-DeepSpeed with DeepSpeed v0.3.13-v0.5.x (2021-03 to 2022-01): ZeRO-3 before the "
                 "v0.6.0 rewrite (stage3.py PartitionedParameterCoordinator @v0.5.0)",
    "zero3_gather": "deepspeed/runtime/zero/partition_parameters.py @v0.5.0 _allgather_param (torch.cuda.synchronize, "
                    "a Python loop over the ranks, a list-API all_gather per parameter) and _reduce_scatter_gradient "
                    "(a list-API reduce_scatter per gradient); stage3.py fetch_sub_module ends in "
                    "_synchronize_communication (torch.cuda.synchronize); the same from v0.3.13 to v0.5.10 (v0.5.5+ "
                    "with torch >= 1.10 gathers with _all_gather_base, still per parameter after a synchronize)",
    "zero3_unit": "DeepSpeed ZeRO-3 fetches each submodule's parameters in its forward/backward pre-hooks "
                  "(stage3.py @v0.5.0 pre_sub_module_forward_function); defaults (constants.py @v0.5.0): "
                  "prefetch bucket 5e7, max live 1e9, max reuse distance 1e9, persistence threshold 1e5 elements",
    "overlap_grad_reduce": "ZeRO-3 reduce-scatters every micro-batch's gradients in its backward (overlap_comm "
                           "True for stage 3; reduce_bucket_size 5e8)",
}


MEGATRON_2023_SRC = {
    "grad_nan_check": "no gradient NaN check before the reduction at 285068c8",
    "average_in_collective": "285068c8 megatron/model/distributed.py allreduce_gradients: buffer_.data /= the DP "
                             "size, then the all-reduce",
    "framework": "Megatron-LM before Megatron-Core's schedules, read at 285068c8 (2023-01-11; the baseline of "
                 "MegaScale, arXiv 2402.15627): megatron/schedules.py",
    "flash_attention": "285068c8 megatron/arguments.py: --use-flash-attn is store_true (off unless asked); "
                       "attention runs as batched matmuls with the fused scale-mask-softmax kernel",
    "overlap_grad_reduce": "285068c8: DistributedDataParallel.allreduce_gradients and the distributed optimizer's "
                           "reduce_model_grads run after the backward pass (no overlap until the 2023 grad buffer)",
    "overlap_param_gather": "285068c8: the distributed optimizer gathers the parameters after the step, not overlapped",
    "tp_comm_overlap": "no TP communication overlap before Transformer Engine's userbuffers",
    "grad_reduce_dtype": "285068c8 megatron/arguments.py l.157-158: with --bf16, accumulate_allreduce_grads_in_fp32 "
                         "is forced on",
    "pipeline_p2p": "285068c8 megatron/p2p_communication.py l.86-88 and 230-231: batch_isend_irecv, waited, then "
                    "torch.cuda.synchronize() after every send/receive",
    "pipeline_scatter_gather": "285068c8 megatron/p2p_communication.py l.148-195, 238-245: the message split into "
                               "1/tp pieces and all-gathered on arrival unless sequence parallel "
                               "(--no-scatter-gather-tensors-in-pipeline turns it off)",
    "loss_allreduce": "285068c8 pretrain_gpt.py loss_func l.68: average_losses_across_data_parallel_group([loss]) "
                      "in every micro-batch",
    "loss_nan_check": "no NaN check in the 285068c8 loss_func",
    "bias_grad": "285068c8: Megatron-LM's own tensor-parallel linears (no Transformer Engine): "
                 "LinearWithGradAccumulationAndAsyncCommunication.backward sums grad_output over the tokens for the "
                 "bias (grad_output.sum(dim=0)); the bias-GeLU and bias-dropout-add fusions' bias gradients are "
                 "summed by autograd",
    "timer_syncs": "285068c8 megatron/arguments.py: --timing-log-level 0 by default ('make sure timing does not "
                   "introduce extra overhead'; 'Timing levels', 77efcccb93, 2022-08-10)",
}

NEMO_SRC = {
    **MEGATRON_CORE_SRC, "framework": "NeMo 2 trains with Megatron-Core",
    "zero": "NeMo's recipes train with the distributed optimizer (ZeRO-1): "
            "distributed_fused_adam_with_cosine_annealing sets use_distributed_optimizer=True "
            "(nemo/collections/llm/recipes/optim/adam.py l.47), and Megatron-Bridge's recipes "
            "cfg.ddp.use_distributed_optimizer = True (src/megatron/bridge/recipes/llama/h100/"
            "llama3.py)",
    "sequence_parallel": "Megatron-Bridge's performance scripts set sequence_parallel = tp > 1 "
                         "(scripts/performance/utils/overrides.py l.478), as NeMo's recipes with "
                         "TP do (llama3_70b.py, llama31_405b.py, gpt3_175b.py: "
                         "sequence_parallelism=True); at TP 1 it changes nothing",
    "fp8_recipe": "NeMo's bf16_with_fp8_mixed recipe: fp8_recipe 'delayed'; its performance "
                  "scripts default to --fp8_recipe ds (per-tensor delayed) "
                  "(nemo/collections/llm/recipes/precision/mixed_precision.py, "
                  "scripts/performance/argument_parser.py)",
    "fp8_param_gather": "NeMo's FP8 mixed-precision recipes set fp8_param_gather=True",
    "loss_allreduce": "NeMo's MaskedTokenLossReduction all-reduces the loss once per step "
                      "(reduce), not per micro-batch (nemo/lightning/megatron_parallel.py)",
    "loss_nan_check": "MaskedTokenLossReduction checks isnan only in validation steps",
    "grad_nan_check": "NeMo's recipes: DistributedDataParallelConfig(check_for_nan_in_grad=True) "
                      "(nemo/collections/llm/recipes/llama3_8b.py and the others)",
    "average_in_collective": "NeMo's recipes: DistributedDataParallelConfig(average_in_collective="
                             "True) (nemo/collections/llm/recipes/llama3_8b.py, 28 recipes)",
    "timer_syncs": "Megatron-Core timers at level 0 (no synchronize)"
}

MEGATRON_2021_SRC = {
    **MEGATRON_CORE_SRC,
    "grad_accumulation": "Megatron-LM 2021 (fda81a212b; the README's 152aab304d alike): the fp16 runs "
                         "use the local DDP without contiguous buffers (--use-contiguous-buffers-in-ddp "
                         "is store_true, forced only for bf16: megatron/arguments.py l.136-155, 579), "
                         "so each micro-batch's weight gradients join param.grad through autograd's "
                         "AccumulateGrad; gradient accumulation fusion arrived on 2022-02-16 "
                         "(83b1e42f30). With bf16 the 2021 code adds each gradient into an fp32 "
                         "main_grad in a hook (10 bytes per parameter per micro-batch), counted as "
                         "autograd's: an approximation",
    "bias_grad": "Megatron-LM 2021 megatron/mpu/layers.py (fda81a212b): ColumnParallelLinear runs "
                 "F.linear with its bias (autograd sums the output gradient to the bias), the "
                 "skip_bias_add linears' biases go through the bias-GeLU and bias-dropout-add "
                 "fusions, whose full-size bias gradient autograd sums the same way",
    "pipeline_scatter_gather": "Megatron-LM 2021 megatron/p2p_communication.py (fda81a212b) "
                               "l.51-55, 71-77, 115-122: scatter_gather_tensors_in_pipeline, on "
                               "by default since 72e4230bb5 (2021-02-16)",
    "loss_allreduce": "Megatron-LM 2021 pretrain_gpt.py loss_func (fda81a212b): "
                      "average_losses_across_data_parallel_group([loss]) in every micro-batch",
    "loss_nan_check": "no NaN check in the 2021 loss_func",
    "grad_nan_check": "no gradient NaN check before the 2021 reduction",
    "average_in_collective": "Megatron-LM 2021 megatron/model/distributed.py allreduce_gradients "
                             "(fda81a212b): buffer_.data /= the DP size, then the all-reduce",
    "timer_syncs": "Megatron-LM 2021 megatron/global_vars.py _Timer.start/stop call "
                   "torch.cuda.synchronize(); megatron/schedules.py times forward-compute and "
                   "backward-compute around every micro-batch (fda81a212b)",
    "tp_comm_overlap": "no TP communication overlap in 2021",
    "grad_reduce_dtype": "the 2021 runs are fp16, whose gradients Megatron-LM "
                        "all-reduces in fp16 (accumulate_allreduce_grads_in_fp32 "
                        "is forced for bf16 only)",
    "flash_attention": "Megatron-LM 2021 computes attention as batched matmuls "
                       "with a fused scale-mask-softmax kernel (no flash attention, "
                       "published 2022)",
    "overlap_grad_reduce": "Megatron-LM 2021 DDP all-reduces the gradients after "
                           "the backward pass (no overlap until the 2023 grad buffer)",
    "overlap_param_gather": "no distributed optimizer in 2021",
    "pipeline_p2p": "Megatron-LM 2021 megatron/p2p_communication.py (fda81a212b): every "
                    "send/receive is batch_isend_irecv, waited, then torch.cuda.synchronize()"
}

FSDP2_PRESET_SRC = {
    **FSDP2_SRC,
    "activation_layout": "tensor parallelism with FSDP2 is DTensor's parallelize_module on [batch, "
                         "seq, hidden] activations (sequence parallelism shards dim 1, as torchtitan "
                         "and the included trainer do); today's PyTorch gathers one sequence on dim 1 "
                         "as a view (#169404, 2025-12) and still copies a reduce-scatter's input "
                         "(torch/distributed/_functional_collectives.py)"
}

LLM_FOUNDRY_SRC = {
    **FSDP2_SRC,
    "zero": "Composer's FSDP sharding_strategy defaults to FULL_SHARD "
            "(llm-foundry's yamls: fsdp_config sharding_strategy: FULL_SHARD)",
    "framework": "Composer FSDP (FULL_SHARD) wrapping each MPT block",
    "flash_attention": "llm-foundry attn_impl 'triton'/'flash' fused attention",
    "attention_kernel": "llm-foundry's published benchmarks "
                        "(scripts/train/benchmarking/submit_benchmarks.py) override "
                        "attn_impl to 'triton' (its Triton FlashAttention kernel)",
    "selective_recompute": "activation_checkpointing per block only (no selective mode)",
    "fp8_recipe": "Composer precision amp_fp8 runs TE te.Linear under DelayedScaling("
                  "fp8_format=HYBRID, amax_history_len=16, amax_compute_algo='max') "
                  "(composer/core/precision.py)",
    "fp8_weight_cast": "Composer calls te.Linear without is_first_microbatch, so TE casts "
                       "each weight in every micro-batch's forward",
    "loss_dtype": "ComposerMPTCausalLM defaults loss_fn to 'fused_crossentropy', flash-attn's "
                  "CrossEntropyLoss kernel on the bf16 logits (no fp32 copy; "
                  "llmfoundry/models/mpt/modeling_mpt.py)",
    "grad_reduce_dtype": "Composer's default FSDP mixed_precision 'DEFAULT' sets "
                        "reduce_dtype=float32 (composer get_mixed_precision; "
                        "'PURE' reduces in the compute dtype)"
}
