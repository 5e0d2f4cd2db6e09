"""Megatron-LM of January 2023 (285068c8, MegaScale's baseline): the megatron-2023 preset's choices,
each read in the code at that commit (schedules/framework_sources.py MEGATRON_2023_SRC), and the rule
mapping a published row's Megatron-LM year to a preset."""

from __future__ import annotations

import dataclasses

import pytest

from profiler.validate.published.frameworks import framework_for
from schedules.frameworks import get_framework
from sim.job import resolve_job
from sim.simulate import simulate


def test_the_2023_code_blocks_at_every_p2p_reduces_after_backward_in_fp32_without_timer_syncs() -> None:
    fields = get_framework("megatron-2023").plan_fields()
    assert fields["pipeline_p2p"] == "blocking" and fields["loss_allreduce"]
    assert not fields["overlap_grad_reduce"] and not fields["overlap_param_gather"]
    assert fields["grad_reduce_dtype"] == "fp32" and not fields["flash_attention"]
    assert not fields["timer_syncs"] and not fields["loss_nan_check"] and not fields["tp_comm_overlap"]


@pytest.mark.parametrize(("text", "preset"), [
    ("Megatron-LM (2021, container pytorch:20.12)", "megatron-2021"),
    ("Megatron-LM, Korthikanti et al. 2022", "megatron-2021"),
    ("Megatron-LM 285068c8 (2023)", "megatron-2023"),
    ("Megatron-LM 2024", "megatron-core"),
    ("Megatron-LM", "megatron-core"),
    ("Megatron-LM / Megatron-Core r0.8.0 2023", "megatron-core"),
])
def test_a_megatron_lm_row_runs_the_code_of_its_year(text: str, preset: str) -> None:
    assert framework_for(text).preset == preset


def _step_s(preset: str, **plan: object) -> float:
    job = resolve_job({"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "tp": 2, "pp": 2,
                       "microbatches": 8, "framework_preset": preset})
    return simulate(dataclasses.replace(job, plan=dataclasses.replace(job.plan, **plan))).metrics.step_time_s


def test_between_2021_and_megatron_core() -> None:
    """Without the 2021 timers' synchronizes it is faster than 2021's code reducing in the same dtype;
    without Megatron-Core's flash attention and overlapped DP communication it is slower than
    Megatron-Core."""
    assert _step_s("megatron-core") < _step_s("megatron-2023") < _step_s("megatron-2021", grad_reduce_dtype="fp32")
