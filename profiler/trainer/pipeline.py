"""Pipeline parallelism with ``torch.distributed.pipelining`` and a manual split by layer ranges.

Each pipeline rank builds only its own virtual stages (torchtitan's manual split): stage ``s``
holds the layers ``config.stage_layer_ranges()[s]``, stage 0 also the embedding, the last stage
the final norm and output projection. Each stage module is then tensor-parallelised and wrapped
for data parallelism, and handed to a ``PipelineStage``; the schedule class runs the micro-batches
(GPipe, 1F1B, interleaved 1F1B, interleaved zero-bubble, ZB-V, DualPipeV). A model without
pipeline parallelism is a one-stage pipeline, so gradient accumulation over micro-batches and
the per-action trace ranges are the same code in every configuration.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed.device_mesh import DeviceMesh

from profiler.trainer.actions import ActionRecorder
from profiler.trainer.config import SCHEDULES, TrainConfig
from profiler.trainer.data_parallel import apply_data_parallel
from profiler.trainer.model import build_model
from profiler.trainer.moe_parallel import apply_expert_data_parallel, apply_expert_parallel
from profiler.trainer.tensor_parallel import apply_tensor_parallel
from profiler.trainer.torch_compat import AnnotatedStage, schedule_class

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def build_stages(config: TrainConfig, mesh: DeviceMesh, device: torch.device,
                 slow_factor: float = 1.0, experts_mesh: DeviceMesh | None = None) -> list[AnnotatedStage]:
    """This rank's pipeline stages, built, parallelised over ``mesh`` (and the MoE experts over
    ``experts_mesh``, see :mod:`profiler.trainer.moe_parallel`) and placed on ``device``."""
    pp_rank = mesh["pp"].get_local_rank()
    ranges = config.stage_layer_ranges()
    stages = []
    for chunk, stage in enumerate(config.rank_stages(pp_rank)):
        module = build_model(config.model, seed=config.seed, layers=ranges[stage],
                             first=stage == 0, last=stage == config.num_stages - 1,
                             recompute=config.recompute == "full").to(device)
        if experts_mesh is not None:
            apply_expert_parallel(module, experts_mesh)
        apply_tensor_parallel(module, mesh["tp"])
        if experts_mesh is not None:
            apply_expert_data_parallel(module, experts_mesh, zero=config.zero)
        apply_data_parallel(module, mesh["dp"], zero=config.zero,
                            comm_delay_s=config.slow_comm_s if config.slow_comm_dim == "dp" else 0.0,
                            offload=config.offload)
        recorder = ActionRecorder(stage=stage, chunk=chunk, device=device, slow_factor=slow_factor)
        stages.append(AnnotatedStage(module, stage, config.num_stages, device,
                                     group=mesh["pp"].get_group(), recorder=recorder))
    return stages


def build_schedule(config: TrainConfig, stages: list[AnnotatedStage], loss_fn: LossFn) -> object:
    """The torch schedule for ``config.schedule`` over this rank's stages.

    ``scale_grads`` divides gradients by the number of micro-batches, so with a mean loss per
    micro-batch the gradient is that of the mean loss over the rank's batch.
    """
    info = SCHEDULES[config.schedule]
    cls = schedule_class(info.torch_class, config.schedule)
    if info.multi:
        return cls(stages, n_microbatches=config.num_microbatches, loss_fn=loss_fn,
                   scale_grads=True)
    return cls(stages[0], n_microbatches=config.num_microbatches, loss_fn=loss_fn,
               scale_grads=True)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over a micro-batch (computed in fp32)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
