"""The run manifest: what was run, where, on which process groups, and what it measured.

Keys: ``config`` (model spec + plan + step fields), ``world_size``, ``losses`` (global loss per
step), ``step_times_s`` (per step, max over ranks), ``step_times_s_by_rank``, ``profiled_steps``
(steps covered by the traces), ``traces`` (file per rank), ``mesh`` (dim names, shape, rank grid),
``process_groups`` (per mesh dim: the groups with their Kineto ``pg_name``/``pg_desc`` and global
ranks), ``ranks`` (per rank: mesh coordinates, stages, device, host, ``fsdp_cpu_offload``: its FSDP2
units run with ``CPUOffloadPolicy``), ``stages`` (layers and rank
of each virtual stage), ``torch_version``, ``backend``, ``device_type``, ``devices``, ``hosts``,
``cpu_count``, ``dtype``.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from profiler.trainer.config import TrainConfig
from profiler.trainer.files import trace_name
from profiler.trainer.torch_compat import AnnotatedStage, fsdp_cpu_offload, process_group_info


def device_name(device: torch.device) -> str:
    """Human name of the device (GPU model, or the host CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def rank_info(config: TrainConfig, mesh: DeviceMesh, stages: list[AnnotatedStage],
              device: torch.device) -> dict[str, Any]:
    """This rank's coordinates, stages, device, host and process groups."""
    return {
        "rank": dist.get_rank(),
        "coords": {dim: mesh[dim].get_local_rank() for dim in mesh.mesh_dim_names or ()},
        "stages": [stage.stage_index for stage in stages],
        "device": str(device),
        "device_name": device_name(device),
        "host": socket.gethostname(),
        "fsdp_cpu_offload": any(fsdp_cpu_offload(stage.submod) for stage in stages),
        "groups": {dim: process_group_info(mesh[dim].get_group())
                   for dim in mesh.mesh_dim_names or ()},
    }


def _process_groups(ranks: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Distinct groups per mesh dim (each rank knows only its own), plus the default group."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for info in ranks:
        for dim, group in info["groups"].items():
            if group not in groups.setdefault(dim, []):
                groups[dim].append(group)
    world = dist.group.WORLD
    if world is not None:
        groups["world"] = [process_group_info(world)]
    return groups


def _stages(config: TrainConfig, ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per virtual stage: its layers and the pipeline rank holding it."""
    holder = {stage: info["coords"]["pp"] for info in ranks for stage in info["stages"]}
    return [{"stage": s, "layers": list(layers), "pp_rank": holder[s],
             "embedding": s == 0, "head": s == config.num_stages - 1}
            for s, layers in enumerate(config.stage_layer_ranges())]


def build_manifest(config: TrainConfig, *, mesh: DeviceMesh, dtype: str, device: torch.device,
                   losses: list[float], step_times_s: list[float],
                   step_times_s_by_rank: list[list[float]],
                   ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest dict (JSON-ready)."""
    resolved = config.to_dict() | {"device": device.type, "dtype": dtype}
    return {
        "config": resolved,
        "world_size": dist.get_world_size(),
        "losses": losses,
        "step_times_s": step_times_s,
        "step_times_s_by_rank": step_times_s_by_rank,
        "profiled_steps": list(range(config.warmup_steps, config.total_steps)),
        "traces": {str(r): trace_name(r) for r in range(dist.get_world_size())},
        "mesh": {"dim_names": list(mesh.mesh_dim_names or ()), "shape": list(mesh.shape),
                 "ranks": mesh.mesh.tolist()},
        "process_groups": _process_groups(ranks),
        "ranks": [{k: v for k, v in info.items() if k != "groups"} for info in ranks],
        "stages": _stages(config, ranks),
        "torch_version": torch.__version__,
        "backend": dist.get_backend(),
        "device_type": device.type,
        "devices": sorted({info["device_name"] for info in ranks}),
        "hosts": sorted({info["host"] for info in ranks}),
        "cpu_count": os.cpu_count(),
        "dtype": dtype,
    }
