"""When FSDP2 reduces gradients under ``torch.distributed.pipelining``: torch itself, then the
simulator's ``plan.grad_sync``.

The fact (torch ``pipelining/stage.py``, ``backward_maybe_with_nosync``): a stage whose module is
an ``FSDPModule`` runs its backwards with gradient sync off and reduces once, after the last
one; any other stage module gets a "regular backward", in which FSDP's own post-backward hooks
reduce-scatter every unit's gradients in every micro-batch's backward. NeMo AutoModel's MoE
models at the commit its performance table was measured at (89e3a9fd) are the second kind:
``apply_fsdp`` shards ``model.model`` (and the head), not the causal-LM module the stage holds.
The first test runs torch's pipelining on 2 gloo ranks and counts the reduce-scatters; the
second checks that the simulator's plan counts the same.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from test_trainer_parity import exit_without_teardown, run_spawned  # noqa: E402

MICROBATCHES = 4
UNITS = 2  # FSDP units that hold parameters: the two layers (the roots hold none of their own)


class _Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(UNITS)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _CausalLM(torch.nn.Module):
    """The stage module, holding the sharded ``model`` as AutoModel's causal-LM classes do."""

    def __init__(self) -> None:
        super().__init__()
        self.model = _Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def _reduce_scatters(wrapped: bool, rank: int, world: int) -> int:
    """Reduce-scatter calls in one pipeline step of ``MICROBATCHES`` micro-batches; the stage
    module is an FSDPModule unless ``wrapped``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    mesh = init_device_mesh("cpu", (world,))
    module = _CausalLM()
    for layer in module.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(module.model, mesh=mesh)
    if not wrapped:
        fully_shard(module, mesh=mesh)
    groups = [dist.new_group([r]) for r in range(world)]  # one one-stage pipeline per rank
    stage = PipelineStage(module, 0, 1, torch.device("cpu"), group=groups[rank])
    schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES, loss_fn=lambda y, _t: y.sum())
    calls: list[str] = []
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):  # FSDP2's call in 2.13 / before
        original = getattr(dist, name, None)
        if original is not None:
            def counted(*args: object, _original: object = original, _name: str = name, **kwargs: object) -> object:
                calls.append(_name)
                return _original(*args, **kwargs)  # type: ignore[operator]
            setattr(dist, name, counted)
    schedule.step(torch.randn(MICROBATCHES, 8), target=torch.randn(MICROBATCHES, 8))
    return len(calls)


def _worker(rank: int, world: int, port: int, cases: list[bool], out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    counts = [_reduce_scatters(wrapped, rank, world) for wrapped in cases]
    if rank == 0:
        Path(out).write_text(json.dumps(counts))
    dist.destroy_process_group()
    exit_without_teardown()


@pytest.mark.slow  # a torchrun launch
def test_pipelining_defers_the_reduction_only_for_an_fsdp_stage_module(tmp_path: Path) -> None:
    """torch's own pipelining: an FSDPModule stage reduces each unit once per step; a stage
    module that only holds FSDP units reduces each of them in every micro-batch's backward."""
    cases = {"fsdp-stage": False, "wrapped-stage": True}
    counts = run_spawned(2, cases, tmp_path / "counts.json", worker=_worker)  # type: ignore[arg-type]
    assert counts == {"fsdp-stage": UNITS, "wrapped-stage": UNITS * MICROBATCHES}


@pytest.mark.parametrize(("grad_sync", "per_step"), [("auto", 1), ("every-microbatch", MICROBATCHES)])
def test_simulated_reductions_and_gathers_follow_grad_sync(grad_sync: str, per_step: int) -> None:
    """The simulator's torch runtime under PP: each unit's reduce-scatter (and, ZeRO-2, its
    all-gather: FSDP reshards after a backward that reduced) once per step with ``auto``, once
    per micro-batch with ``every-microbatch``."""
    from sim.job import resolve_job
    from sim.simulate import simulate

    job = resolve_job({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 2, "dp": 4,
                       "zero": 2, "framework": "torch", "global_batch": 4 * MICROBATCHES, "layers": 4,
                       "grad_sync": grad_sync})
    assert job.plan.num_microbatches == MICROBATCHES
    spans = simulate(job).timeline.spans
    names = spans[spans["rank"] == 0]["name"].astype(str)
    for unit in ("root", "L0", "L1"):
        assert (names == f"{unit}.grad_rs").sum() == per_step
        assert (names == f"{unit}.param_ag").sum() == per_step
