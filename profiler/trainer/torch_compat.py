"""The one place that touches torch APIs which are private or not documented as stable.

- ``replicate``: FSDP2-based replicated data parallelism. It lives in a private module in torch
  2.13 (``torch.distributed._composable.replicate_with_fsdp``); unlike DDP it understands TP
  DTensor parameters and ``PipelineStage`` drives its gradient sync like ``fully_shard``'s.
- :class:`AnnotatedStage`: a ``PipelineStage`` whose per-micro-batch entry points
  (``forward_one_chunk``, ``backward_one_chunk``, ``backward_weight_one_chunk``; public names,
  but not documented) run inside trainsim's action ranges. Every torch schedule, single- or
  multi-stage, calls exactly these for F, B (or I) and W actions.
- :func:`process_group_info`: a process group's name and description as Kineto writes them in
  ``distributedInfo.pg_config``.
- :func:`schedule_class`: looks a schedule class up by name, so a torch lacking one gives a
  clear error.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
from torch import nn
from torch.distributed._composable.replicate_with_fsdp import replicate
from torch.distributed.pipelining import PipelineStage

from profiler.trainer.actions import ActionRecorder

__all__ = ["AnnotatedStage", "process_group_info", "replicate", "schedule_class"]


class AnnotatedStage(PipelineStage):
    """A pipeline stage whose forward/backward actions are recorded (and maybe slowed)."""

    def __init__(self, submodule: nn.Module, stage_index: int, num_stages: int,
                 device: torch.device, group: dist.ProcessGroup, recorder: ActionRecorder) -> None:
        super().__init__(submodule, stage_index, num_stages, device, group=group)
        self.recorder = recorder

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        with self.recorder.action("F", fwd_chunk_id):
            return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> None:
        with self.recorder.action("B", bwd_chunk_id):
            super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)

    def backward_weight_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> None:
        with self.recorder.action("W", bwd_chunk_id):
            super().backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs)


def schedule_class(class_name: str, schedule: str) -> type:
    """The ``torch.distributed.pipelining`` class ``class_name`` (for trainsim's ``schedule``)."""
    cls = getattr(pipelining, class_name, None)
    if cls is None:
        raise ValueError(f"schedule={schedule!r} needs torch.distributed.pipelining.{class_name}, "
                         f"which torch {torch.__version__} does not have")
    return cls


def process_group_info(group: dist.ProcessGroup) -> dict[str, Any]:
    """Name, description and global ranks of ``group`` (as in Kineto's ``pg_config``)."""
    return {
        "pg_name": str(getattr(group, "group_name", "")),
        "pg_desc": str(getattr(group, "group_desc", "")),
        "ranks": list(dist.get_process_group_ranks(group)),
    }
