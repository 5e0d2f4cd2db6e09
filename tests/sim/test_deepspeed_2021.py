"""The deepspeed-2021 preset (DeepSpeed v0.3.13-v0.5.x ZeRO-3: per-parameter list-API collectives
after device synchronizes, :mod:`schedules.passes.zero3_2021`) against component measurements of
that code, and the published-run rule that selects it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from profiler.validate.published.frameworks import deepspeed_2021, framework_for
from sim.job import Job, resolve_job
from sim.simulate import simulate


def _job(fields: dict[str, Any], fused_qkv: bool = True) -> Job:
    job = resolve_job({"zero": 3, "tp": 1, "pp": 1, "recompute": "full", **fields})
    return dataclasses.replace(job, model=dataclasses.replace(job.model, fused_qkv=fused_qkv))


def _step_s(fields: dict[str, Any], fused_qkv: bool = True) -> float:
    return simulate(_job(fields, fused_qkv)).metrics.step_time_s


def _gpt175b(nodes: int, framework: str) -> float:
    """GPT-3 175B, ZeRO-3 over every GPU, global batch 1536 sequences, one micro-batch per GPU."""
    return _step_s({"model": "gpt3-175b", "cluster": "dgx-a100", "nodes": nodes, "framework_preset": framework,
                    "global_batch": 1536, "microbatch_size": 1536 // (8 * nodes)})


@pytest.mark.slow
def test_fixed_global_batch_step_does_not_halve_when_gpus_double() -> None:
    """At a fixed global batch each GPU gathers and reduces the same bytes per step while its
    compute halves; the 2021 code adds, per weight and per gradient tensor, a host loop and a copy
    kernel per rank (both double with the GPUs) and synchronizes the device around every gather, so
    they are not hidden: 384 -> 768 GPUs keeps well over half of the step (the coalesced v0.6.2 code
    nearly halves), and 768 -> 1,536 does not shorten it."""
    old = [_gpt175b(n, "deepspeed-2021") for n in (48, 96, 192)]
    new = [_gpt175b(n, "deepspeed") for n in (48, 96)]
    assert old[1] / old[0] >= 0.6
    assert new[1] / new[0] < 0.56
    assert old[2] >= old[1]


def _bert_5b_pass_ms(framework: str, zero: int) -> tuple[float, float]:
    """(forward, backward) of one micro-batch of DeepSpeed's bing_bert 5.1B (hidden 2560, 64 layers,
    intermediate 10240, query/key/value apart) on one p4d (8 A100), sequence 128, 8 per GPU."""
    job = _job({"layers": 64, "hidden": 2560, "heads": 40, "ffn_hidden": 10240, "vocab": 32003, "seq_len": 128,
                "cluster": "aws-p4d", "nodes": 1, "zero": zero, "framework_preset": framework, "global_batch": 64,
                "microbatch_size": 8, "recompute": "none", "elementwise": "eager"}, fused_qkv=False)
    spans = simulate(job).timeline.spans
    spans = spans[spans["rank"] == spans["rank"].min()]
    out = []
    for kind in ("fwd", "bwd"):
        mine = spans[spans["kind"] == kind]
        out.append(float(mine["end_s"].max() - mine["start_s"].min()) * 1e3)
    return out[0], out[1]


def test_zero3_forward_on_one_node_is_several_times_zero2s() -> None:
    """DeepSpeed #1174 (DeepSpeed 0.3.16, 8 x A100 p4d, BERT 5B): ZeRO-3 "forward time is around
    480ms... in ZeRO2 configuration the forward time is only about 60ms"; PR #1188 (same model, one
    p4d): forward ~470 ms and backward ~900 ms before its fixes. Order of magnitude: the 2021 code's
    forward within a factor 2 of 480 ms and at least 3x the ZeRO-2 forward; its backward within a
    factor 2 of 900 ms."""
    forward, backward = _bert_5b_pass_ms("deepspeed-2021", 3)
    zero2_forward, _ = _bert_5b_pass_ms("deepspeed", 2)
    assert 240 <= forward <= 960 and 450 <= backward <= 1800
    assert forward >= 3 * zero2_forward


def _roberta_tflops_ratio(hidden: int, layers: int, heads: int) -> float:
    """PR #1453's setup: Hugging Face RoBERTa (query/key/value apart, no fused kernels, vocab ~53k)
    on 8 p4d (64 A100), batch 16 per GPU, sequence 512, layer-wise checkpointing: the 2021 code's
    TFLOPS over the fixed code's (the deepspeed preset, v0.6.2, which carries the PR). The sizes are
    not published: 10B as 32 layers of 5120, 50B as 62 of 8192 (12 h^2 L)."""
    fields = {"layers": layers, "hidden": hidden, "heads": heads, "vocab": 53248, "seq_len": 512,
              "ffn_hidden": 4 * hidden, "cluster": "aws-p4d", "nodes": 8, "global_batch": 64 * 16,
              "microbatch_size": 16, "elementwise": "eager"}
    return (_step_s({**fields, "framework_preset": "deepspeed"}, fused_qkv=False)
            / _step_s({**fields, "framework_preset": "deepspeed-2021"}, fused_qkv=False))


ROBERTA = [(5120, 32, 40, 54.86 / 92.07), (8192, 62, 64, 67.61 / 116.06)]


@pytest.mark.parametrize(("hidden", "layers", "heads", "measured"), ROBERTA)
def test_2021_code_is_slower_than_the_fixed_code_at_64_gpus(hidden: int, layers: int, heads: int,
                                                             measured: float) -> None:
    """DeepSpeed PR #1453 (8 p4d): Roberta-10B 54.86 -> 92.07 and Roberta-50B 67.61 -> 116.06
    TFLOPS/GPU. The mechanisms modelled give it or part of it: the 2021 code is slower, by more than
    a tenth, and not by more than a tenth beyond the measured 0.58-0.60x."""
    assert measured - 0.10 < _roberta_tflops_ratio(hidden, layers, heads) < 0.9


@pytest.mark.parametrize(("hidden", "layers", "heads", "measured"), [
    pytest.param(*ROBERTA[0], id="roberta-10b"),  # 0.60 with the ring FIFO window (topo/nccl_window.py)
    pytest.param(*ROBERTA[1], id="roberta-50b", marks=pytest.mark.xfail(
        strict=True, reason="the modelled 2021 mechanisms give 0.75x for RoBERTa-50B at 64 p4d GPUs, not "
                            "PR #1453's measured 0.58x (known gap, see the module docstring of "
                            "schedules.passes.zero3_2021)")),
])
@pytest.mark.slow  # one expected failure (known gap): the full suite tracks it
def test_2021_code_ratio_within_a_tenth_of_pr_1453(hidden: int, layers: int, heads: int, measured: float) -> None:
    assert _roberta_tflops_ratio(hidden, layers, heads) == pytest.approx(measured, abs=0.10)


def test_preset_changes_nothing_without_zero3() -> None:
    fields = {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 2, "zero": 1, "microbatches": 4}
    assert _step_s({**fields, "framework_preset": "deepspeed-2021"}) == _step_s({**fields, "framework_preset": "deepspeed"})


@pytest.mark.parametrize(("text", "preset"), [
    ("DeepSpeed 0.6.2 + Megatron-DeepSpeed, PyTorch 1.10.2", "deepspeed"),
    ("DeepSpeed ZeRO-3, no model parallelism (2021)", "deepspeed-2021"),
    ("DeepSpeed v0.5.4", "deepspeed-2021"),
    ("deepspeed 0.3.16, PyTorch 1.8", "deepspeed-2021"),
    ("DeepSpeed 0.10.1 (2023)", "deepspeed"),
    ("Megatron-DeepSpeed (bigscience fork) + DeepSpeed BF16_Optimizer", "deepspeed"),
])
def test_published_rows_of_2021_deepspeed_get_the_2021_preset(text: str, preset: str) -> None:
    """The documented rule: DeepSpeed named with a version below 0.6 or, without a version, 2021."""
    assert framework_for(text).preset == preset
    assert deepspeed_2021(text) is (preset == "deepspeed-2021")
