"""Fixed costs (schedules/optimizer_traffic.py, topo/host_overheads.py) against the frameworks' sources
(pass counts restated here from the code, not from the module) and published host-bound runs."""

from __future__ import annotations

import pytest

from schedules.optimizer_traffic import (
    ClipKind,
    OptimizerKernel,
    clip_bytes_per_param,
    clip_host_syncs,
    optimizer_bytes_per_param,
    optimizer_kernels,
)
from topo.host_overheads import (
    EAGER_OP_HOST_S,
    MODULE_OP_HOST_S,
    exposed_host_s,
    launch_bound_time_s,
    megatron_step_collectives,
)


def test_adam_bytes_per_param_from_the_sources() -> None:
    # fused AdamW / apex multi_tensor_adam: read p, g, m, v and write p, m, v, fp32: 7 x 4
    assert optimizer_bytes_per_param(OptimizerKernel.TORCH_FUSED_ADAMW) == 28
    # Megatron: + fp32 master -> bf16 model copy (4 + 2); the grad buffer zeroing is its own op
    assert optimizer_bytes_per_param("megatron-fused-adam") == 28 + 6
    # torch foreach AdamW: mul_ 2, lerp_ 3, mul_ 2, addcmul_ 4, sqrt 2, div_ 2, add_ 2, addcdiv_ 4
    assert optimizer_bytes_per_param("torch-foreach-adamw") == 4 * 21
    assert optimizer_bytes_per_param("torch-foreach-adamw", weight_decay=False) == 4 * 19
    # the foreach step moves 3x the fused step's bytes: a memory-bound step 3x as long
    ratio = optimizer_bytes_per_param("torch-foreach-adamw") / optimizer_bytes_per_param("torch-fused-adamw")
    assert ratio == 3.0
    assert optimizer_kernels("torch-fused-adamw", 100) == 1 and optimizer_kernels("torch-fused-adamw", 0) == 0


def test_clip_bytes_per_param() -> None:
    assert clip_bytes_per_param(ClipKind.TORCH, clipped=False) == 12  # norm + unconditional scale
    assert clip_bytes_per_param("megatron", clipped=False) == 4  # norm only
    assert clip_bytes_per_param("megatron", clipped=True) == 12
    assert clip_bytes_per_param("torch", grad_bytes=2) == 6
    assert clip_host_syncs("megatron") == 1 and clip_host_syncs("torch") == 0


def test_launch_bound_closed_forms() -> None:
    h = 10e-6
    assert launch_bound_time_s([1e-3] * 5, h) == pytest.approx(h + 5e-3)  # GPU-bound: first issue + work
    assert launch_bound_time_s([1e-6] * 5, h) == pytest.approx(5 * h + 1e-6)  # host-bound
    assert launch_bound_time_s([], h) == 0.0
    assert exposed_host_s([1e-3] * 5, h) == pytest.approx(h)
    # one long kernel in a chain of tiny ones hides the issues behind it
    assert launch_bound_time_s([1e-6, 1e-3, 1e-6, 1e-6], h) == pytest.approx(2 * h + 1e-3 + 2e-6)


@pytest.mark.parametrize(("batch", "eager_ms", "graph_ms"),
                         [(2, 92.854, 56.13), (4, 93.676, 71.465), (8, 105.099, 105.381),
                          (16, 167.292, 167.966), (32, 297.315, 297.989), (64, 561.262, 562.029)])
def test_resnet50_host_bound_steps(batch: int, eager_ms: float, graph_ms: float) -> None:
    # pytorch/benchmark PR #706 (ResNet-50 train, V100): eager vs CUDA graph step time. The host's
    # time per step is taken from batch 1 (eager 89.033 ms, host-bound); the GPU's work at each
    # batch is the CUDA-graph time. The model predicts the eager time at every other batch.
    n = 1000
    predicted = launch_bound_time_s([graph_ms / n] * n, 89.033 / n)
    assert predicted == pytest.approx(eager_ms, rel=0.06)


def test_host_time_facts() -> None:
    assert EAGER_OP_HOST_S == 7e-6  # pytorch/pytorch #41383
    assert MODULE_OP_HOST_S == pytest.approx(45.3e-6, rel=0.01)  # sam2 #768: 53.7 ms / 1185 launches


def test_megatron_step_collectives() -> None:
    found = megatron_step_collectives(pp=4, tp=8, vocab=51200, hidden=12288, tied_embeddings=True,
                                      sequence_parallel=True, norm_params_per_stage=2 * 12288 * 24)
    by_name = {c.name: c for c in found}
    assert by_name["embedding_grads"].elements == 51200 / 8 * 12288
    assert by_name["embedding_grads"].group == "pp_ends"
    assert by_name["grad_norm"].elements == 1
    assert "layernorm_grads" in by_name
    alone = megatron_step_collectives(pp=1, tp=1, vocab=51200, hidden=4096, tied_embeddings=True,
                                      sequence_parallel=False, norm_params_per_stage=0)
    assert [c.name for c in alone] == ["grad_norm"]


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="^kernel='adam' is invalid"):
        optimizer_bytes_per_param("adam")
    with pytest.raises(ValueError, match="^kernel_s="):
        launch_bound_time_s([-1.0], 1e-6)
    with pytest.raises(ValueError, match="^pp=0 is invalid"):
        megatron_step_collectives(pp=0, tp=1, vocab=1, hidden=1, tied_embeddings=False,
                                  sequence_parallel=False, norm_params_per_stage=0)
