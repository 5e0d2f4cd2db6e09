"""The training loop of one rank: mesh, stages, optimizer, steps, global loss, recording.

The caller initialises ``torch.distributed`` (torchrun + :mod:`profiler.trainer.__main__`, or a
test harness); :func:`train` builds everything else from a :class:`TrainConfig`, runs
``config.total_steps`` steps and returns the global loss and wall-clock time of every step.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.profiler import record_function

from profiler.annotations import OPTIMIZER, step_name
from profiler.trainer.actions import synchronize
from profiler.trainer.config import TrainConfig
from profiler.trainer.data import rank_batch
from profiler.trainer.files import MANIFEST, write_json
from profiler.trainer.manifest import build_manifest, rank_info
from profiler.trainer.moe_parallel import expert_mesh, expert_rank_info
from profiler.trainer.pipeline import build_schedule, build_stages, cross_entropy
from profiler.trainer.recording import record_steps
from profiler.trainer.torch_compat import AnnotatedStage
from profiler.trainer.zero1 import ZeroOneOptimizer

log = logging.getLogger(__name__)
MESH_DIMS = ("pp", "dp", "tp")  # outermost to innermost: TP peers are consecutive ranks


class InjectedFailure(RuntimeError):
    """Raised by ``--fail-rank`` to test failure handling."""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What a run measured (the same on every rank).

    Attributes:
        losses: global mean loss of each step (all steps, warm-up included).
        step_times_s: wall-clock time of each step, the maximum over ranks.
        step_times_s_by_rank: wall-clock time of each step on each rank.
        manifest: the run manifest (also written to ``out_dir`` by rank 0), if recorded.
    """

    losses: list[float]
    step_times_s: list[float]
    step_times_s_by_rank: list[list[float]]
    manifest: dict[str, Any] | None = field(default=None)


def resolve_device(name: str) -> torch.device:
    """The rank's device for ``auto | cpu | cuda`` (CUDA device = LOCAL_RANK's GPU)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device")
        index = torch.cuda.current_device()
        return torch.device("cuda", index)
    return torch.device("cpu")


def resolve_dtype(name: str, device: torch.device) -> str:
    """``fp32`` or ``bf16`` for ``auto | fp32 | bf16`` (auto: bf16 on a CUDA device that has it)."""
    if name == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return name


def make_optimizer(config: TrainConfig, stages: list[AnnotatedStage], mesh: DeviceMesh) -> Any:
    """AdamW (no weight decay) or plain SGD, fixed lr, over the rank's stages; ZeRO-1 shards
    the optimizer states over the DP ranks."""

    def make(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        if config.optimizer == "sgd":
            return torch.optim.SGD(params, lr=config.lr)
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)

    params = [p for stage in stages for p in stage.submod.parameters()]
    if config.zero == 1 and config.dp > 1:
        return ZeroOneOptimizer(params, dp_group=mesh["dp"].get_group(), make=make)
    return make(params)


@dataclass(frozen=True, kw_only=True)
class Trainer:
    """Everything one rank trains with, built by :func:`setup`."""

    config: TrainConfig
    device: torch.device
    dtype: str
    mesh: DeviceMesh
    stages: list[AnnotatedStage]
    optimizer: Any
    schedule: Any
    experts_mesh: DeviceMesh | None = None

    @property
    def rank(self) -> int:
        """Global rank."""
        return dist.get_rank()


def setup(config: TrainConfig) -> Trainer:
    """Build the mesh, this rank's parallelised stages, the optimizer and the schedule."""
    if dist.get_world_size() != config.world_size:
        raise ValueError(f"world size {dist.get_world_size()} != tp*pp*dp = {config.world_size}")
    device = resolve_device(config.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    mesh = init_device_mesh(device.type, (config.pp, config.dp, config.tp), mesh_dim_names=MESH_DIMS)
    experts_mesh = expert_mesh(mesh, config.ep)
    slow = config.slow_factor if dist.get_rank() == config.slow_rank else 1.0
    stages = build_stages(config, mesh, device, slow_factor=slow, experts_mesh=experts_mesh)
    return Trainer(config=config, device=device, dtype=resolve_dtype(config.dtype, device),
                   mesh=mesh, stages=stages, optimizer=make_optimizer(config, stages, mesh),
                   schedule=build_schedule(config, stages, cross_entropy), experts_mesh=experts_mesh)


def train_step(trainer: Trainer, step: int) -> torch.Tensor:
    """One optimizer step; returns this rank's mean micro-batch loss (0 off the last stage)."""
    config, device, stages = trainer.config, trainer.device, trainer.stages
    spec = config.model
    inputs, targets = rank_batch(seed=config.seed, step=step, batch=config.global_batch,
                                 seq_len=spec.seq_len, vocab_size=spec.vocab_size,
                                 dp_rank=trainer.mesh["dp"].get_local_rank(), dp=config.dp)
    first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
    losses: list[torch.Tensor] = []
    args = (inputs.to(device),) if first else ()
    kwargs: dict[str, Any] = {"target": targets.to(device), "losses": losses} if last else {}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=trainer.dtype == "bf16"):
        trainer.schedule.step(*args, **kwargs)
    with record_function(OPTIMIZER):
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
    if not last:
        return torch.zeros((), device=device)
    return torch.stack([loss.detach().float() for loss in losses]).mean()


def global_losses(step_losses: list[torch.Tensor], config: TrainConfig) -> list[float]:
    """Mean over the global batch of each step: sum over ranks / (last-stage ranks = dp*tp)."""
    total = torch.stack(step_losses)
    dist.all_reduce(total)
    return (total / (config.dp * config.tp)).tolist()


def gather_times(times_s: list[float], device: torch.device) -> list[list[float]]:
    """Every rank's step times (rank-major)."""
    local = torch.tensor(times_s, dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [t.tolist() for t in gathered]


def run_steps(trainer: Trainer, out_dir: Path | None) -> tuple[list[torch.Tensor], list[float]]:
    """All steps under the profiler: per step this rank's loss and wall-clock seconds."""
    config, rank = trainer.config, trainer.rank
    losses, times_s = [], []
    with record_steps(out_dir, rank=rank, warmup_steps=config.warmup_steps, steps=config.steps,
                      device=trainer.device) as prof:
        for step in range(config.total_steps):
            start_s = time.perf_counter()
            with record_function(step_name(step)):
                losses.append(train_step(trainer, step))
            synchronize(trainer.device)
            times_s.append(time.perf_counter() - start_s)
            log.info("step %d/%d time %.3fs", step + 1, config.total_steps, times_s[-1])
            if rank == config.fail_rank and step == config.total_steps - 1:
                raise InjectedFailure(f"injected failure on rank {rank} (--fail-rank)")
            prof.step()
    return losses, times_s


def train(config: TrainConfig, *, out_dir: Path | None = None) -> RunResult:
    """Run ``config`` on the initialised process group; record traces into ``out_dir`` if given."""
    trainer = setup(config)
    step_losses, times_s = run_steps(trainer, out_dir)
    losses = global_losses(step_losses, config)
    by_rank = gather_times(times_s, trainer.device)
    step_times = [max(column) for column in zip(*by_rank, strict=True)]
    infos: list[Any] = [None] * dist.get_world_size()
    info, experts = rank_info(config, trainer.mesh, trainer.stages, trainer.device), expert_rank_info(trainer.experts_mesh)
    info = info | {key: info[key] | experts[key] for key in ("coords", "groups")}
    dist.all_gather_object(infos, info)
    manifest = build_manifest(config, mesh=trainer.mesh, dtype=trainer.dtype,
                              device=trainer.device, losses=losses, step_times_s=step_times,
                              step_times_s_by_rank=by_rank, ranks=infos)
    if out_dir is not None and trainer.rank == 0:
        write_json(out_dir / MANIFEST, manifest)
    return RunResult(losses=losses, step_times_s=step_times, step_times_s_by_rank=by_rank,
                     manifest=manifest)
