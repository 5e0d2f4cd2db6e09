"""FSDP2 CPU-offload copies in parsed traces are Timeline kind "offload".

- A real recording (2 gloo ranks, tiny model, ZeRO-3, one micro-batch per rank): in a steady step
  each rank copies every parameter tensor host->device for its forward all-gather and every
  gradient shard device->host after its reduce-scatter, both outside autograd ops, so the parsed
  step holds 2 x (parameter tensors of the model, counted by torch) offload spans; the backward
  gathers run inside autograd ops and stay in their compute spans. The same run without offload
  has none.
- A synthetic GPU trace: host<->device memcpys launched inside ``FSDP::all_gather`` /
  ``FSDP::post_backward_reduce`` are offload, the same memcpys elsewhere (input upload, loss
  read-back) and a device-to-device copy inside the range are not.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from test_kineto_builders import BWD_TID, TraceBuilder  # noqa: E402
from test_trainer_parity import exit_without_teardown, free_port, sgd  # noqa: E402

from profiler.kineto import load_run  # noqa: E402
from profiler.trainer.config import TrainConfig  # noqa: E402
from profiler.trainer.model import build_model  # noqa: E402
from profiler.trainer.train import train  # noqa: E402

STEPS = 2


def _record(rank: int, world: int, port: int, config: TrainConfig, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        train(config, out_dir=Path(out))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()


def _recorded(tmp: Path, offload: str) -> pd.DataFrame:
    config = sgd(dp=2, zero=3, global_batch=4, microbatch_size=2, steps=STEPS, offload=offload)
    mp.start_processes(_record, args=(2, free_port(), config, str(tmp)), nprocs=2,
                       start_method="spawn")
    return load_run(tmp, all_steps=True).timeline.spans


@pytest.fixture(scope="module")
def offloaded(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    return _recorded(tmp_path_factory.mktemp("offload-trace"), "optimizer")


@pytest.mark.slow
def test_recorded_offload_copies_are_labelled(offloaded: pd.DataFrame) -> None:
    tensors = len(list(build_model(sgd().model, seed=0).parameters()))
    spans = offloaded[offloaded["kind"] == "offload"]
    last = STEPS - 1  # step 0 also runs the pipeline's shape-inference forward
    for rank in (0, 1):
        steady = spans[(spans["rank"] == rank) & (spans["step"] == last)]
        assert len(steady) == 2 * tensors
    assert set(spans["name"]) == {"aten::to"}
    assert set(spans["lane"]) == {"compute"}
    assert (spans["end_s"] >= spans["start_s"]).all()


@pytest.mark.slow
def test_no_offload_spans_without_offload(tmp_path: Path) -> None:
    spans = _recorded(tmp_path, "none")
    assert len(spans) > 0 and not (spans["kind"] == "offload").any()


def _gpu_rank(rank: int) -> TraceBuilder:
    b = TraceBuilder(rank)
    b.step(1, 0, 1000)
    b.ann("trainsim:F s=0 c=0 mb=0", 10, 300)
    b.launched_kernel("Memcpy HtoD (Pageable -> Device)", 12, 20, 5, cat="gpu_memcpy", bytes=64)
    b.ann("FSDP::all_gather (layers.0)", 30, 50)
    b.launched_kernel("Memcpy HtoD (Pinned -> Device)", 35, 40, 10, cat="gpu_memcpy", bytes=4096)
    b.launched_kernel("Memcpy DtoD (Device -> Device)", 45, 60, 5, cat="gpu_memcpy", bytes=4096)
    b.ann("FSDP::all_gather_copy_out (layers.0)", 90, 20)
    b.launched_kernel("Memcpy HtoD (Pinned -> Device)", 95, 120, 10, cat="gpu_memcpy", bytes=16)
    b.ann("trainsim:B s=0 c=0 mb=0", 400, 300)
    b.ann("FSDP::post_backward_reduce (layers.0)", 420, 60, tid=BWD_TID)
    b.launched_kernel("Memcpy DtoH (Device -> Pinned)", 430, 500, 20, tid=BWD_TID, cat="gpu_memcpy",
                      bytes=2048)
    b.launched_kernel("Memcpy DtoH (Device -> Pageable)", 800, 810, 5, cat="gpu_memcpy", bytes=4)
    b.step(2, 1000, 1000)
    return b


def test_gpu_memcpys_in_fsdp_ranges_are_offload(tmp_path: Path) -> None:
    for rank in (0, 1):
        _gpu_rank(rank).write(tmp_path / f"rank{rank}.json.gz", gz=True)
    spans = load_run(tmp_path).timeline.spans
    rank0 = spans[spans["rank"] == 0].sort_values("start_s")
    memcpy = rank0[rank0["lane"] == "memcpy"]
    assert list(memcpy["kind"]) == ["other", "offload", "other", "other", "offload", "other"]
    offload = memcpy[memcpy["kind"] == "offload"]
    assert list(offload["bytes"]) == [4096, 2048]
