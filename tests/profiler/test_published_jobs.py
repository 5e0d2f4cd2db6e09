"""Published rows -> simulator jobs: each kind of row maps onto the plan, cluster and model its
source states; unstated settings are marked assumed, inexact ones approximated, and rows the plan
cannot express get a one-line reason naming the missing feature."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.validate.published.jobs import RowJob, job_for_row
from profiler.validate.published.notes import Unexpressible
from profiler.validate.published.rows import PublishedRow, read_rows

GIB = 2**30

FSDP_A100 = """
name = "fsdp-a100"
gpu = "A100 80GB"
gpu_memory_gb = 80
gpus = 64
framework = "torchtitan (PyTorch FSDP2)"
dtype = "bf16"
layers = 32
hidden = 4096
heads = 32
kv_heads = 8
ffn_hidden = 14336
ffn_kind = "swiglu"
vocab = 128256
seq_len = 8192
tp = 1
pp = 1
cp = 1
dp = 64
zero = 3
sequence_parallel = false
recompute = "selective (per-op SAC)"
microbatch_size = 1
global_batch = 64
measured_step_s = 2.7555
"""

MEGATRON_CORE = """
name = "mcore-h100"
gpu = "H100 (variant not stated)"
gpus = 768
framework = "Megatron-LM / Megatron-Core r0.8.0"
dtype = "not stated"
layers = 84
hidden = 8192
heads = 64
kv_heads = 64
ffn_hidden = 32768
ffn_kind = "gelu"
vocab = 131072
seq_len = 4096
tp = 8
pp = 2
cp = 1
dp = 48
zero = 1
sequence_parallel = true
recompute = "not stated"
global_batch = 384
measured_step_s = 2.177
"""

MEGATRON_2021 = """
name = "megatron-2021"
gpu = "A100 (memory not stated)"
gpus = 1024
framework = "Megatron-LM (2021, container pytorch:20.12)"
dtype = "fp16"
layers = 96
hidden = 12288
heads = 96
kv_heads = 96
ffn_hidden = 49152
ffn_kind = "gelu"
vocab = 50257
seq_len = 2048
tp = 8
pp = 16
vpp = 1
cp = 1
dp = 8
zero = 0
sequence_parallel = false
recompute = "full (--checkpoint-activations)"
microbatch_size = 1
grad_accum = 192
global_batch = 1536
measured_step_s = 32.0
"""

BLOOM = """
name = "bloom"
gpu = "A100 80GB"
gpu_memory_gb = 80
gpus = 384
network = "8 GPUs/node with NVLink; 4 Omni-Path (OPA) links per node, dedicated NCCL subnet"
framework = "Megatron-DeepSpeed (bigscience fork) + DeepSpeed BF16_Optimizer"
dtype = "bf16"
layers = 70
hidden = 14336
heads = 112
kv_heads = 112
ffn_hidden = 57344
ffn_kind = "gelu"
vocab = 250880
seq_len = 2048
tp = 4
pp = 12
cp = 1
dp = 8
zero = 1
sequence_parallel = false
recompute = "full (--checkpoint-activations)"
microbatch_size = 2
grad_accum = 128
global_batch = 2048
measured_step_s = 104.7
"""

DEEPSPEED_OFFLOAD = """
name = "ds-offload"
gpu = "A100 80GB (Azure NDm A100 v4)"
gpu_memory_gb = 80
gpus = 256
network = "200 Gb/s HDR InfiniBand per GPU; 1.7 TB host RAM per 8-GPU node"
framework = "DeepSpeed 0.6.2 + Megatron-DeepSpeed, PyTorch 1.10.2"
dtype = "not stated"
layers = 96
hidden = 12288
heads = 96
kv_heads = 96
ffn_hidden = 49152
ffn_kind = "gelu (Megatron-DeepSpeed GPT default; not stated)"
seq_len = 512
tp = 1
pp = 1
cp = 1
dp = 256
zero = 3
sequence_parallel = false
recompute = "implied full (96-coefficient FLOP formula counts a recompute forward)"
offload = "ZeRO-3 CPU offload: 'activation and optimizer states are allocated in the main memory'"
microbatch_size = 32
measured_step_s = 112.269
"""

FOUNDRY_A100_40 = """
name = "foundry-a100-40"
gpu = "A100 40GB"
gpu_memory_gb = 40
gpus = 128
network = "1600 Gbps node-node (RoCE)"
framework = "llm-foundry / Composer (PyTorch FSDP1)"
dtype = "bf16 (bf16, MP mode PURE)"
layers = 40
hidden = 5120
heads = 40
kv_heads = 40
ffn_hidden = 20480
ffn_kind = "gelu"
vocab = 50368
seq_len = 2048
tp = 1
pp = 1
cp = 1
dp = 128
zero = 3
recompute = "full"
microbatch_size = 16
grad_accum = 1
global_batch = 2048
measured_step_s = 16.6148
"""


def rows_from(tmp_path: Path, *tables: str) -> list[PublishedRow]:
    path = tmp_path / "runs.toml"
    path.write_text("".join(f"[[run]]\n{t}\n" for t in tables))
    return read_rows(path)


def one_job(tmp_path: Path, table: str, **extra: str) -> RowJob:
    """The job of one row: ``table`` plus keys it does not have (``extra``, text values)."""
    text = table + "".join(f'{k} = "{v}"\n' for k, v in extra.items())
    return job_for_row(rows_from(tmp_path, text)[0])


def codes(notes: tuple) -> set[str]:
    return {n.code for n in notes}


def test_fsdp_row_maps_onto_zero3_data_parallel(tmp_path: Path) -> None:
    rj = one_job(tmp_path, FSDP_A100)
    job = rj.job
    p, m, c = job.plan, job.model, job.cluster
    assert (p.tp, p.pp, p.cp, p.dp, p.zero) == (1, 1, 1, 64, 3)
    assert (p.microbatch_size, p.global_batch, p.recompute, p.dtype) == (1, 64, "selective", "bf16")
    # the torchtitan preset: FSDP2 units (torch runtime), SDPA flash kernel, eager element-wise ops,
    # foreach AdamW, per-op SAC
    assert (p.framework, p.selective_recompute, p.elementwise, p.optimizer) == \
        ("torch", "alternate-matmul", "eager", "foreach")
    assert p.flash_attention and p.overlap_grad_reduce and not p.tp_comm_overlap
    assert (m.num_layers, m.hidden_size, m.num_heads, m.kv_heads, m.ffn, m.vocab_size, m.seq_len) == \
        (32, 4096, 32, 8, 14336, 128256, 8192)
    assert (m.ffn_kind, m.norm, m.position_embedding, m.bias) == ("swiglu", "rmsnorm", "rope", False)
    assert not m.tied_embeddings  # Llama-style: its own output projection
    assert (c.device.name, c.nodes, c.gpus_per_node, c.num_gpus) == ("a100-80gb", 8, 8, 64)
    assert codes(rj.assumed) == {"network"}  # no network stated: the preset's
    assert codes(rj.approx) == set()


def test_torchtitan_compile_async_tp_and_per_layer_sac(tmp_path: Path) -> None:
    text = FSDP_A100.replace('framework = "torchtitan (PyTorch FSDP2)"',
                             'framework = "torchtitan (FSDP2 + DTensor TP, async TP)"\ncompile = "on"')
    text = text.replace("tp = 1", "tp = 8").replace("dp = 64", "dp = 8").replace("global_batch = 64", "global_batch = 8")
    text = text.replace('"selective (per-op SAC)"', '"selective (per-layer)"').replace("sequence_parallel = false",
                                                                                       "sequence_parallel = true")
    rj = job_for_row(rows_from(tmp_path, text)[0])
    p = rj.job.plan
    assert p.tp_comm_overlap and p.sequence_parallel  # async TP: TP collectives beside their matmuls
    assert p.elementwise == "fused"  # torch.compile fuses the element-wise work
    assert codes(rj.approx) == {"compile", "sac-layer"}


def test_unstated_megatron_settings_take_documented_defaults(tmp_path: Path) -> None:
    rj = one_job(tmp_path, MEGATRON_CORE)
    p = rj.job.plan
    assert (p.microbatch_size, p.recompute, p.dtype, p.vpp, p.schedule) == (1, "none", "bf16", 1, "1f1b")
    assert p.num_microbatches == 384 // (48 * 1)
    assert p.sequence_parallel and p.overlap_grad_reduce and p.overlap_param_gather and p.flash_attention
    assert p.tp_comm_overlap and p.framework == "megatron"  # the README's --tp-comm-overlap
    assert codes(rj.assumed) == {"mbs", "recompute", "dtype", "vpp", "gpu-memory", "network", "tied-embeddings"}
    assert codes(rj.approx) == set()
    assert rj.job.cluster.device.name == "h100-sxm" and rj.job.cluster.nodes == 96
    assert rj.job.model.tied_embeddings  # Megatron-Core's GPTModel shares them unless --untie-... (GPT_STYLE)


def test_megatron_2021_pads_the_vocabulary_and_runs_its_era_kernels(tmp_path: Path) -> None:
    rj = one_job(tmp_path, MEGATRON_2021)
    # The Megatron-LM README's own figure: 50257 padded to 51200 at TP 8 (multiple of 128 x 8).
    assert rj.job.model.vocab_size == 51200
    p = rj.job.plan
    assert not p.flash_attention and not p.overlap_grad_reduce and not p.tp_comm_overlap
    assert (p.dtype, p.recompute, p.num_microbatches) == ("bf16", "full", 192)
    assert codes(rj.approx) == {"fp16"} and codes(rj.assumed) == {"gpu-memory", "network", "tied-embeddings"}


def test_bloom_uneven_stages_and_omni_path_links(tmp_path: Path) -> None:
    rj = one_job(tmp_path, BLOOM)
    p, c = rj.job.plan, rj.job.cluster
    assert p.uneven_stages and (p.pp, p.num_microbatches) == (12, 128)
    assert not p.overlap_grad_reduce and not p.overlap_param_gather  # DeepSpeed pipeline engine, ZeRO-1 in the step
    assert (c.nics_per_node, c.nic.name if c.nic else None) == (4, "roce-100g")  # 4 x 100 Gb/s OPA links
    assert "nic-link" in codes(rj.approx) and {"uneven-stages", "vpp"} <= codes(rj.assumed)


def test_deepspeed_offload_row_without_global_batch(tmp_path: Path) -> None:
    rj = one_job(tmp_path, DEEPSPEED_OFFLOAD)
    p, m, c = rj.job.plan, rj.job.model, rj.job.cluster
    assert (p.offload, p.offload_device, p.offload_activations) == ("optimizer", "cpu", True)
    assert (p.global_batch, p.num_microbatches) == (32 * 256, 1)  # one micro-batch per step, assumed
    assert m.vocab_size == 50304  # GPT-2 BPE 50257 padded to a multiple of 128 (TP 1)
    assert (p.recompute, p.dtype, p.flash_attention, p.zero3_unit) == ("full", "bf16", False, "module")
    assert (c.nics_per_node, c.nic.name if c.nic else None) == (8, "ib-hdr")
    assert codes(rj.assumed) == {"grad-accum", "vocab", "recompute", "dtype", "zero3-limits", "tied-embeddings"}


def test_node_total_network_and_a100_40gb(tmp_path: Path) -> None:
    rj = one_job(tmp_path, FOUNDRY_A100_40)
    c = rj.job.cluster
    assert c.device.name == "a100-40gb"
    assert (c.nics_per_node, c.nic.name if c.nic else None) == (8, "roce-200g")  # 1600 Gb/s = 8 x 200G RoCE
    assert codes(rj.assumed) == {"nic-count", "tied-embeddings"}  # MPTConfig ties by default


@pytest.mark.parametrize(("network", "nics", "link"), [
    ("400 Gbps inter-node, GPUDirect RDMA", 2, "ib-hdr"),  # kind unstated: the preset's InfiniBand
    ("800 Gbps inter-node", 4, "ib-hdr"),
    ("8x H100 NVLink per host; 400 Gb/s per GPU backend RDMA", 8, "ib-ndr"),
    ("400 Gb/s per GPU RoCE", 8, "roce-400g"),
])
def test_network_texts(tmp_path: Path, network: str, nics: int, link: str) -> None:
    c = one_job(tmp_path, FSDP_A100, network=network).job.cluster
    assert (c.nics_per_node, c.nic.name if c.nic else None) == (nics, link)


def test_h100_hbm2e_variant_keeps_its_memory(tmp_path: Path) -> None:
    text = MEGATRON_CORE.replace('gpu = "H100 (variant not stated)"', 'gpu = "H100 96GB HBM2e"\ngpu_memory_gb = 96')
    rj = job_for_row(rows_from(tmp_path, text)[0])
    assert rj.job.cluster.device.hbm_bytes == 96 * GIB
    assert "gpu-variant" in codes(rj.approx) and "gpu-memory" not in codes(rj.assumed)


def test_global_batch_from_tokens(tmp_path: Path) -> None:
    text = FSDP_A100.replace("global_batch = 64\n", "global_batch_tokens = 524288\n")
    assert job_for_row(rows_from(tmp_path, text)[0]).job.plan.global_batch == 524288 // 8192


@pytest.mark.parametrize(("table", "edit", "words"), [
    (FSDP_A100, ("zero = 3", 'zero = 3\nzero_note = "hybrid (HSDP)"'),
     "hybrid sharding without its shard group stated (zero_note 'hybrid (HSDP)'): expected 'shard inside node'"),
    (FSDP_A100, ("measured_step_s = 2.7555", 'step_basis = "not derivable"'), "no measured step time (not derivable"),
    (FSDP_A100, ("ffn_hidden = 14336", ""), "FFN width not stated"),
    (FSDP_A100, ("dp = 64", "dp = 32"), "tp*pp*cp*dp = 32 differs from gpus = 64"),
    (FSDP_A100, ("global_batch = 64", 'global_batch_tokens = "2M (Table 1)"'), "global batch not stated in sequences"),
    (FSDP_A100, ('gpu = "A100 80GB"', 'gpu = "MI300X"'), "GPU 'MI300X': no cluster preset"),
    (MEGATRON_2021, ("grad_accum = 192", "grad_accum = 100"), "differs from micro-batch x dp x grad_accum = 800"),
    (FSDP_A100, ('ffn_kind = "swiglu"', 'ffn_kind = "geglu"'), "FFN kind 'geglu'"),
])
def test_unexpressible_rows_name_the_missing_feature(tmp_path: Path, table: str, edit: tuple[str, str],
                                                     words: str) -> None:
    row = rows_from(tmp_path, table.replace(*edit))[0]
    with pytest.raises(Unexpressible) as info:
        job_for_row(row)
    message = str(info.value)
    assert words in message and "\n" not in message


def test_hsdp_row_shards_inside_a_node_and_replicates_across_nodes(tmp_path: Path) -> None:
    text = FSDP_A100.replace("zero = 3", 'zero = 3\nzero_note = "hybrid (HSDP: shard inside node, replicate across nodes)"')
    plan = job_for_row(rows_from(tmp_path, text)[0]).job.plan
    assert (plan.dp, plan.dp_replicate, plan.zero_shard, plan.hybrid) == (64, 8, 8, True)


def test_every_reason_is_given_at_once(tmp_path: Path) -> None:
    text = FSDP_A100.replace("measured_step_s = 2.7555", "").replace("ffn_hidden = 14336", "")
    with pytest.raises(Unexpressible, match="no measured step time.*; FFN width not stated"):
        job_for_row(rows_from(tmp_path, text)[0])


def test_h100_hbm2e_runs_on_the_lower_tdp_part(tmp_path: Path) -> None:
    # torchtitan's Grand Teton H100s: 2.4 TB/s HBM2e, a peak between the NVL and SXM parts
    text = MEGATRON_CORE.replace('gpu = "H100 (variant not stated)"',
                                 'gpu = "H100 96GB HBM2e (Grand Teton), 500 W power limit"\ngpu_memory_gb = 96')
    d = job_for_row(rows_from(tmp_path, text)[0]).job.cluster.device
    assert d.hbm_GBps == 2400.0
    assert 835e12 < d.peak_bf16_flops < 989e12
    plain = job_for_row(rows_from(tmp_path, MEGATRON_CORE)[0]).job.cluster.device
    assert plain.name == "h100-sxm"


def test_llm_foundry_models_train_without_dropout_and_a_fused_loss() -> None:
    """MPT's dropout probabilities default to 0.0 (llm-foundry configuration_mpt.py) and its loss is
    flash-attn's fused cross entropy on the bf16 logits (modeling_mpt.py 'fused_crossentropy'):
    with both, the 3B runs at 8k and 32k tokens that ran on 80 GB fit in the simulation too."""
    from profiler.validate.published.rows import FP8_FILE
    from profiler.validate.published.run import validate_row

    rows = {r.name: r for r in read_rows(FP8_FILE)}
    job = job_for_row(rows["llmfoundry-h100x8-mpt3b-s8192-bf16"]).job
    assert job.model.dropout is False and job.plan.loss_dtype == "compute"
    result = validate_row(rows["llmfoundry-h100x8-mpt3b-s8192-bf16"])
    assert result.sim is not None and result.sim.fits_hbm


def test_a_stack_named_only_as_pytorch_fsdp_runs_the_fsdp2_preset() -> None:
    """PyTorch FSDP without a named stack trains on PyTorch's runtime (was: the Megatron-Core
    default); named stacks that run or name FSDP keep their own entries."""
    from profiler.validate.published.frameworks import framework_for

    for text in ("PyTorch FSDP", "HF Accelerate + FSDP (FULL_SHARD)", "FSDP2 + torch.compile"):
        found = framework_for(text)
        assert found.preset == "fsdp2" and [n.code for n in found.assumed] == ["fsdp-stack"], text
    named = {"torchtitan (PyTorch FSDP2 + DTensor TP)": "torchtitan", "llm-foundry / Composer (PyTorch FSDP1)":
             "llm-foundry", "Megatron-Bridge 25.11 (Megatron-FSDP)": "nemo", "NeMo AutoModel (FSDP2, TE, DeepEP)":
             "fsdp2", "Megatron-LM / Megatron-Core r0.8.0": "megatron-core"}
    for text, preset in named.items():
        assert framework_for(text).preset == preset, text


@pytest.mark.parametrize(("ffn_kind", "tied"), [("gelu", True), ("swiglu", False), ("relu", False)])
def test_gpt_style_rows_tie_their_embeddings(tmp_path: Path, ffn_kind: str, tied: bool) -> None:
    # GPT-style (GeLU) codes share the word embedding with the output projection by default
    # (jobs.GPT_STYLE); Llama-style SwiGLU and Nemotron's squared-ReLU rows keep their own head
    rj = one_job(tmp_path, MEGATRON_CORE.replace('ffn_kind = "gelu"', f'ffn_kind = "{ffn_kind}"'))
    assert rj.job.model.tied_embeddings is tied
    assert ("tied-embeddings" in codes(rj.assumed)) is tied
