"""Megatron-LM's scatter/gather of pipeline messages (the megatron-2021/2023 presets): each TP rank
sends 1/tp of the activation and the receiver all-gathers it over TP on the compute stream before
the action (megatron/p2p_communication.py @fda81a212b l.51-55, 71-77, 115-122); not with sequence
parallelism (already 1/tp), not in Megatron-Core. DeepSpeed's PipelineEngine partitions its messages
the same way (``is_pipe_partitioned = is_grad_partitioned = is_model_parallel``, pipe/engine.py):
the deepspeed presets."""

from __future__ import annotations

import pytest

from core.vocab import Kind, Lane
from schedules.frameworks import get_framework
from schedules.stage_ops import full_message_bytes
from sim.job import resolve_job
from sim.simulate import build_priced, simulate

BASE = {"model": "gpt3-18b", "cluster": "dgx-a100", "nodes": 8, "tp": 8, "pp": 4, "dp": 2, "global_batch": 64,
        "microbatch_size": 1}


def _graph(**settings):
    job = resolve_job({**BASE, **settings})
    return job, build_priced(job).graph


@pytest.mark.parametrize("preset", ["megatron-2021", "deepspeed", "deepspeed-2021"])
def test_a_tp_share_is_sent_and_gathered_on_arrival(preset: str) -> None:
    job, g = _graph(framework_preset=preset)
    full = full_message_bytes(job.model, job.plan)
    sends = [t for t in g.tasks if t.kind == Kind.SEND]
    recvs = [i for i, t in enumerate(g.tasks) if t.kind == Kind.RECV]
    assert sends and all(t.ops[0].bytes == pytest.approx(full / 8) for t in sends)
    assert recvs
    for i in recvs:  # the next task is its gather: on the compute stream, waiting for the receive
        gather = g.tasks[i + 1]
        assert gather.lane == Lane.COMPUTE and gather.name.startswith("gather ") and i in g.deps[i + 1]
        assert len(gather.ops) == 1 and gather.ops[0].kind == Kind.ALL_GATHER and gather.ops[0].lane == Lane.TP
        assert gather.ops[0].bytes == pytest.approx(full)
        # the action's first block waits for the gather, not for the bare receive
        block = next(j for j in range(i + 2, len(g.tasks)) if g.tasks[j].lane == Lane.COMPUTE
                     and not g.tasks[j].name.startswith("gather "))
        assert i + 1 in g.deps[block] and i not in g.deps[block]


@pytest.mark.parametrize("settings", [{"framework_preset": "megatron-2021", "sequence_parallel": True},
                                      {"framework_preset": "megatron-core"},
                                      {"framework_preset": "megatron-2023", "tp": 1, "dp": 16}])
def test_no_gather_with_sequence_parallelism_megatron_core_or_one_tp_rank(settings) -> None:
    job, g = _graph(**settings)
    assert not job.plan.scatter_gather_p2p
    assert not any(t.name.startswith("gather ") for t in g.tasks)
    sends = [t for t in g.tasks if t.kind == Kind.SEND]
    share = job.plan.tp if job.plan.sequence_parallel else 1
    assert all(t.ops[0].bytes == pytest.approx(full_message_bytes(job.model, job.plan) / share) for t in sends)


def test_a_tp_share_over_the_nics_is_faster_than_the_whole_message() -> None:
    """GPT-3 18B, TP8 PP4 DP2 on 8 DGX A100, each stage on its own node: every message crosses
    InfiniBand; a 1/8 share per rank plus an NVLink all-gather beats the whole message per rank."""
    on = simulate(resolve_job({**BASE, "framework_preset": "megatron-2021"})).metrics.step_time_s
    off = simulate(resolve_job({**BASE, "framework_preset": "megatron-2021",
                                "pipeline_scatter_gather": False})).metrics.step_time_s
    assert on < off


def test_the_presets_say_where_it_comes_from() -> None:
    for name in ("megatron-2021", "megatron-2023"):
        preset = get_framework(name)
        assert preset.choices["pipeline_scatter_gather"] is True
        assert "p2p_communication.py" in preset.sources["pipeline_scatter_gather"]
    assert get_framework("megatron-core").choices.get("pipeline_scatter_gather", False) is False


def test_deepspeeds_pipeline_engine_partitions_its_messages() -> None:
    for name in ("deepspeed", "deepspeed-2021"):
        preset = get_framework(name)
        assert preset.choices["pipeline_scatter_gather"] is True
        assert "is_pipe_partitioned" in preset.sources["pipeline_scatter_gather"]
