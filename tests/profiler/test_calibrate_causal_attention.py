"""A calibrated attention rate is not slowed twice by the causal mask.

The microbenchmark times causal SDPA (``compute_bench.attention_sample``), so its rate already is a
causal kernel's at its length. The pricing slows a fused op by ``fused_attention_rate`` of the
device's compute capability (the causal mask and the kernel's length against the presets' 8k); the
fit divides each sample by the same factor, so a causal op of a measured shape is priced at its
measured time on a CPU host (no compute capability: factor 1, field = measured rate) and on a GPU
cluster (the field is the unmasked 8k kernel's rate, as the presets' are).
"""

from __future__ import annotations

import dataclasses

import pytest

from profiler.calibrate.microbench_fit import compute_fields
from schedules.attention_kernels import fused_attention_rate
from schedules.layer_ops import attention_core_ops, layer_shape
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.pricing import TaskCoster
from topo import get_cluster
from topo.collectives import CollectiveModel
from topo.placement import Placement

PEAK = 100e9  # the GEMM sweep's best rate (the fitted peak)
HEADS, SEQ, HEAD_DIM = 8, 2048, 64
MEASURED_RATE = 30e9  # causal SDPA, over the halved FLOPs


def _samples() -> list[dict]:
    flops = 4.0 * SEQ * SEQ * HEADS * HEAD_DIM * 0.5
    return [{"bench": "gemm", "m": 512, "k": 1024, "n": 1024, "flops": 2.0 * 512 * 1024 * 1024,
             "seconds": 2.0 * 512 * 1024 * 1024 / PEAK},
            {"bench": "attention", "heads": HEADS, "seq": SEQ, "head_dim": HEAD_DIM, "flops": flops,
             "seconds": flops / MEASURED_RATE}]


def _priced_causal_forward_s(cluster_name: str, fields: dict) -> float:
    """The simulator's seconds for the measured shape's causal forward on the calibrated device
    (kernel overhead and the slowest-GPU pace taken out)."""
    cluster = get_cluster(cluster_name, nodes=1)
    device = dataclasses.replace(cluster.device, peak_bf16_flops=fields["peak_fp32_flops"],
                                 attention_efficiency=fields["attention_efficiency"])
    coster = TaskCoster(CollectiveModel(dataclasses.replace(cluster, device=device)), Placement(sizes={"dp": 1}),
                        dtype="bf16", gpus_per_node=cluster.gpus_per_node)
    model = ModelSpec(num_layers=1, hidden_size=HEADS * HEAD_DIM, num_heads=HEADS, vocab_size=32000, seq_len=SEQ)
    (op,) = attention_core_ops(layer_shape(model, ParallelPlan(microbatch_size=1, global_batch=1)), 0, "fwd", "attn")
    assert op.causal
    return coster.op_duration(op, 0) / coster.compute_pace - coster.device.kernel_overhead_s


def test_cpu_host_keeps_the_measured_causal_rate() -> None:
    fields, _ = compute_fields(_samples(), get_cluster("cpu-host").device.compute_capability)
    assert fields["attention_efficiency"] == pytest.approx(MEASURED_RATE / PEAK, rel=1e-3)
    assert _priced_causal_forward_s("cpu-host", fields) == pytest.approx(_samples()[1]["seconds"], rel=1e-3)


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100"])
def test_gpu_cluster_stores_the_unmasked_rate_and_reproduces_the_measurement(cluster: str) -> None:
    cc = get_cluster(cluster).device.compute_capability
    fields, _ = compute_fields(_samples(), cc)
    ratio = fused_attention_rate(cc, SEQ, SEQ, HEAD_DIM, causal=True)
    assert ratio < 0.9  # a factor that would show if it were applied twice (or not at all)
    assert fields["attention_efficiency"] == pytest.approx(MEASURED_RATE / PEAK / ratio, rel=1e-3)
    assert _priced_causal_forward_s(cluster, fields) == pytest.approx(_samples()[1]["seconds"], rel=1e-3)
