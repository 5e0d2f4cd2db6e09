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
- :func:`fsdp_cpu_offload`: whether FSDP2 units run with ``CPUOffloadPolicy`` (read from the
  units' private state: ``fully_shard`` has no public getter for its offload policy).
- :func:`delay_fsdp_comms`, :class:`DelayLine`: FSDP2's custom all-gather / reduce-scatter hooks
  (the comm classes live in a private module) and ``_create_work_from_future``, for
  ``--slow-comm``.
- :func:`unflatten_mesh`: ``DeviceMesh._unflatten``, the expert-parallel (edp, ep) mesh.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
from torch import nn
from torch.distributed._composable.replicate_with_fsdp import replicate
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)
from torch.distributed.pipelining import PipelineStage

from profiler.trainer.actions import ActionRecorder

__all__ = ["AnnotatedStage", "DelayLine", "delay_fsdp_comms", "fsdp_cpu_offload",
           "process_group_info", "replicate", "schedule_class", "unflatten_mesh"]


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


def fsdp_cpu_offload(module: nn.Module) -> bool:
    """True if every FSDP2 parameter group under ``module`` has a ``CPUOffloadPolicy`` (and
    there is at least one); False otherwise."""
    groups = [group for sub in module.modules() if isinstance(sub, FSDPModule)
              for group in sub._get_fsdp_state()._fsdp_param_groups]  # type: ignore[attr-defined]
    return bool(groups) and all(isinstance(g.offload_policy, CPUOffloadPolicy) for g in groups)


class DelayLine:
    """Completes each work ``delay_s`` after it finished (a link with ``delay_s`` more latency:
    the transfer itself and the collectives after it are not held up, only the result's
    arrival). Each delayed work is released by its own short-lived daemon thread."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def _release(self, work: dist.Work, fut: torch.futures.Future[None]) -> None:
        try:
            work.wait()
            time.sleep(self.delay_s)
            fut.set_result(None)
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits on the work
            fut.set_exception(exc)  # type: ignore[arg-type]

    def delayed(self, work: dist.Work) -> dist.Work:
        """A Work that completes ``delay_s`` after ``work``."""
        fut: torch.futures.Future[None] = torch.futures.Future()
        threading.Thread(target=self._release, args=(work, fut), name="trainsim-delay", daemon=True).start()
        return torch._C._distributed_c10d._create_work_from_future(fut)  # type: ignore[attr-defined]


class _DelayedAllGather(DefaultAllGather):
    def __init__(self, line: DelayLine) -> None:
        super().__init__()
        self.line = line

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, async_op: bool = False) -> dist.Work | None:
        issued = super().__call__(output_tensor, input_tensor, group, async_op=True)
        assert issued is not None  # async_op=True always returns a Work
        work = self.line.delayed(issued)
        if async_op:
            return work
        work.wait()
        return None


class _DelayedReduceScatter(DefaultReduceScatter):
    def __init__(self, line: DelayLine) -> None:
        super().__init__()
        self.line = line

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op: Any, async_op: bool = False) -> dist.Work:
        work = self.line.delayed(super().__call__(output_tensor, input_tensor, group, op, async_op=True))
        if not async_op:
            work.wait()
        return work


def delay_fsdp_comms(module: nn.Module, line: DelayLine) -> None:
    """Route the all-gathers and reduce-scatters of an FSDP2 module through ``line``."""
    if not isinstance(module, FSDPModule):
        raise TypeError(f"{type(module).__name__} is not an FSDP2 (fully_shard) module")
    module.set_custom_all_gather(_DelayedAllGather(line))
    module.set_custom_reduce_scatter(_DelayedReduceScatter(line))


def unflatten_mesh(mesh: DeviceMesh, sizes: tuple[int, ...], names: tuple[str, ...]) -> DeviceMesh:
    """A 1-D mesh split into dims ``names`` of ``sizes`` (innermost last), its process groups
    created (``DeviceMesh._unflatten``: private in torch 2.13). Submeshes of the result share the
    root of ``mesh``, so FSDP2 can combine them with the TP mesh."""
    return mesh._unflatten(0, sizes, names)
