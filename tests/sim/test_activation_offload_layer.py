"""DeepSpeed's CPU checkpointing (``activation_offload_unit="layer"``) against its documented
behaviour: CheckpointFunction copies each checkpointed layer's inputs to the host with a blocking
``.to`` at the end of the layer's forward and back before its recomputation
(deepspeed/runtime/activation_checkpointing/checkpointing.py @v0.6.2), so the copies sit on the
compute stream, one per layer and pass, and only the blocks' checkpoints leave HBM."""

from __future__ import annotations

import pytest

from schedules.frameworks import get_framework
from schedules.plan import ParallelPlan
from sim.job import resolve_job
from sim.simulate import build_priced, simulate
from topo.memory import host_copy_GBps

S, H, A, V, L, MBS, MICROBATCHES = 1024, 4096, 32, 1000, 4, 2, 3
GPT = dict(layers=L, hidden=H, heads=A, vocab=V, seq_len=S)


def _job(**extra):
    return resolve_job({**GPT, "cluster": "dgx-a100", "nodes": 1, "gpus_per_node": 1, "tp": 1, "pp": 1, "dp": 1,
                        "microbatch_size": MBS, "global_batch": MBS * MICROBATCHES, "recompute": "full",
                        "flash_attention": False, "ideal_network": True, **extra})


def _checkpoint_bytes() -> float:
    return 2 * S * MBS * H  # a block's input in bf16: all that full recomputation stores (Korthikanti §5)


def test_each_layer_copies_its_checkpoint_out_and_back_on_the_compute_stream():
    job = _job(offload_activations=True, activation_offload_unit="layer")
    assert not (simulate(job).timeline.spans["lane"].astype(str) == "memcpy").any()  # no copy stream
    graph = build_priced(job).graph
    copies = [(op.name.split(".")[1], op.bytes) for t in graph.tasks if t.lane == "compute" and t.step == 0
              for op in t.ops if op.op_class in ("pcie_to_host", "pcie_to_device")]
    assert len(copies) == 2 * L * MICROBATCHES
    assert [b for _, b in copies] == pytest.approx([_checkpoint_bytes()] * len(copies))
    assert sorted({name for name, _ in copies}) == ["ckpt_to_device", "ckpt_to_host"]


def test_the_step_grows_by_exactly_the_copies():
    # one GPU, no communication: the compute stream is the step, so the synchronous copies add
    # their whole time: per layer and micro-batch, bytes / device-to-host + bytes / host-to-device
    # bandwidth (every GPU of the node copying, topo.memory.host_copy_GBps)
    base = simulate(_job(offload_activations=False))
    off = simulate(_job(offload_activations=True, activation_offload_unit="layer"))
    cluster = off.job.cluster
    per_layer = _checkpoint_bytes() / 1e9 * (1 / host_copy_GBps(cluster, "dram", "to_host", cluster.gpus_per_node)
                                             + 1 / host_copy_GBps(cluster, "dram", "to_device", cluster.gpus_per_node))
    extra = off.metrics.step_time_s - base.metrics.step_time_s
    assert extra == pytest.approx(L * MICROBATCHES * per_layer, rel=1e-6)


def test_only_the_blocks_checkpoints_leave_hbm_and_the_host_holds_them():
    on_gpu = simulate(_job(offload_activations=False))
    off = simulate(_job(offload_activations=True, activation_offload_unit="layer"))
    layers = L * _checkpoint_bytes()
    # pp = 1: one micro-batch in flight, so the HBM peak drops by the blocks' share of one
    assert on_gpu.memory_timelines[0].peak_bytes - off.memory_timelines[0].peak_bytes == pytest.approx(layers)
    assert off.host_activation_peak[0] == pytest.approx(layers)


def test_deepspeed_preset_offloads_per_layer_and_the_stage_unit_stays_the_default():
    assert ParallelPlan().activation_offload_unit == "stage"
    assert get_framework("deepspeed").value("activation_offload_unit") == "layer"
    assert "checkpointing.py" in get_framework("deepspeed").sources["activation_offload_unit"]


def test_an_unknown_unit_is_a_one_line_error():
    with pytest.raises(ValueError, match="activation_offload_unit='block'.*stage.*layer"):
        ParallelPlan(activation_offload_unit="block")
