"""DeepSpeed 2021's ZeRO-3 (``zero3_gather="per-param"``): which weights each submodule gathers and
reduces (deepspeed/runtime/zero/stage3.py @v0.5.0: fetch_sub_module, prefetch_next_sub_modules,
_keep_for_later; partition_parameters.py: _allgather_param, _reduce_scatter_gradient), and the
ops woven into a layer block (schedules/passes/zero3_2021.py)."""

from __future__ import annotations

import dataclasses

import pytest

from core.groups import DP
from core.vocab import Kind, Lane, OpClass
from schedules.model import ModelSpec
from schedules.model_presets import get_model
from schedules.passes.zero3_2021 import weave_layer
from schedules.passes.zero3_2021_trace import pass_events
from schedules.plan import ParallelPlan, check_plan
from schedules.work import ModelWork

PER_PARAM = {"zero": 3, "zero3_unit": "module", "zero3_gather": "per-param"}


def _plan(**kw: object) -> ParallelPlan:
    return ParallelPlan(**{"dp": 384, "global_batch": 384, "recompute": "full", **PER_PARAM, **kw})  # type: ignore[arg-type]


def test_large_weights_are_prefetched_one_module_ahead() -> None:
    """175B: every weight exceeds the 5e7-element prefetch bucket, so each fetch synchronizes and
    gathers exactly the next weight (stage3.py get_params_to_prefetch stops once numel is reached)."""
    model = get_model("gpt3-175b")
    forward = pass_events(model, _plan(), "F")
    h = model.hidden_size
    assert [e.use.module for e in forward] == ["qkv", "proj", "fc1", "fc2"]
    assert all(e.sync and not e.own and len(e.prefetched) == 1 for e in forward)
    assert [e.prefetched[0] for e in forward] == [h * h, 4 * h * h, 4 * h * h, 3 * h * h]


def test_recomputed_weight_kept_for_its_backward_within_the_reuse_distance() -> None:
    """_keep_for_later: fc2's recomputed forward is followed at once by its backward (distance 0 <
    1e9 elements): kept, so its backward neither gathers nor synchronizes; fc1 and proj are regathered
    (the elements in between exceed 1e9 for a 175B layer)."""
    events = {e.use.module + e.use.tag: e for e in pass_events(get_model("gpt3-175b"), _plan(), "B")}
    assert not events["fc2.backward"].sync and not events["fc2.backward"].prefetched
    assert events["fc1.recompute"].sync and events["fc2.recompute"].prefetched == (4 * 12288 * 12288,)


def test_small_weights_are_prefetched_in_batches_of_the_bucket() -> None:
    """1.7B: one prefetch takes weights until their elements reach stage3_prefetch_bucket_size
    (5e7); the fetches whose weights arrived in it do not synchronize."""
    forward = pass_events(get_model("gpt3-1.7b"), _plan(), "F")
    batches = [e.prefetched for e in forward if e.prefetched]
    assert len(batches) == 1 and sum(batches[0]) >= 5e7 > sum(batches[0][:-1])
    assert sum(e.sync for e in forward) == 1


def test_every_gradient_tensor_is_reduce_scattered_once_per_backward() -> None:
    """One list-API reduce_scatter per parameter tensor: a GPT layer's 4 weights, 4 biases and 2
    LayerNorms (weight and bias), issued at the next submodule's backward."""
    events = pass_events(get_model("gpt3-175b"), _plan(), "B")
    assert sum(len(e.reduced) for e in events) == 4 + 4 + 2 * 2
    assert not any(e.reduced for e in events if e.use.tag == ".backward" and e.use.module == "fc2")


def _weave(model: ModelSpec, plan: ParallelPlan, phase: str, first: bool = False, last: bool = False):  # type: ignore[no-untyped-def]
    ops = ModelWork(model, plan, False)._layer_ops(3, phase)
    return ops, weave_layer(model, plan, phase, 3, ops, first, last)


def test_woven_block_keeps_the_compute_and_adds_the_hooks_work() -> None:
    model, plan = get_model("gpt3-175b"), _plan()
    ops, woven = _weave(model, plan, "B")
    gemms = [op for op in woven if op.op_class == OpClass.GEMM]
    assert sum(op.flops for op in gemms) == pytest.approx(sum(op.flops for op in ops if op.op_class == OpClass.GEMM))
    gathers = [op for op in woven if op.op_class == OpClass.ALL_GATHER]
    loops = [op for op in woven if op.op_class == OpClass.RANK_LOOP and op.kind == Kind.ALL_GATHER]
    copies = [op for op in woven if op.op_class == OpClass.RANK_COPIES and op.kind == Kind.ALL_GATHER]
    expected = sum(len(e.own) + len(e.prefetched) for e in pass_events(model, plan, "B"))
    assert len(gathers) == len(loops) == len(copies) == expected
    assert all(op.lane == Lane.HOST and op.dim == DP for op in loops)
    reductions = [op for op in woven if op.op_class == OpClass.REDUCE_SCATTER]
    assert len(reductions) == 12 and all(op.concurrent for op in reductions)


def test_a_module_weight_gradient_follows_its_input_gradient() -> None:
    """Autograd runs a Linear's backward (input and weight gradient) before the next module's."""
    _, woven = _weave(get_model("gpt3-175b"), _plan(), "B")
    names = [op.name for op in woven if op.op_class == OpClass.GEMM and op.name.endswith(("dgrad", "wgrad"))]
    assert names == [f"L3.{m}.{g}" for m in ("fc2", "fc1", "proj", "qkv") for g in ("dgrad", "wgrad")]


def test_first_backward_block_reduces_nothing_earlier_and_last_one_reduces_its_own() -> None:
    model, plan = get_model("gpt3-175b"), _plan()
    _, middle = _weave(model, plan, "B")
    _, first = _weave(model, plan, "B", first=True)
    _, last = _weave(model, plan, "B", last=True)

    def count(ops) -> int:  # type: ignore[no-untyped-def]
        return sum(op.op_class == OpClass.REDUCE_SCATTER for op in ops)
    assert (count(first), count(middle), count(last)) == (12 - 4, 12, 12 + 4)
    assert not any(op.concurrent for op in last[-12:])  # the epilogue runs after the block


def test_separate_query_key_value_are_three_gemms_and_three_fetches() -> None:
    """Hugging Face BERT/RoBERTa: query, key and value are three Linear modules (fused_qkv False)."""
    model = dataclasses.replace(get_model("gpt3-1.7b"), fused_qkv=False)
    ops, woven = _weave(model, _plan(), "F")
    split = [op for op in woven if op.name in ("L3.q", "L3.k", "L3.v")]
    qkv = next(op for op in ops if op.name == "L3.qkv")
    assert [op.name for op in split] == ["L3.q", "L3.k", "L3.v"]
    assert sum(op.flops for op in split) == pytest.approx(qkv.flops)
    assert [e.use.module for e in pass_events(model, _plan(), "F")] == ["q", "k", "v", "proj", "fc1", "fc2"]


@pytest.mark.parametrize(("kw", "word"), [
    ({"zero3_unit": "block"}, "zero3_unit=module"),
    ({"framework": "torch"}, "framework=megatron"),
    ({"offload": "optimizer"}, "offload"),
    ({"schedule": "zb-h1", "pp": 2, "dp": 192}, "whole backward"),
])
def test_per_param_needs_deepspeed_module_fetches(kw: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match=f"zero3_gather='per-param' is invalid: .*{word}"):
        _plan(**kw)


def test_per_param_refuses_expert_models() -> None:
    model = get_model("small")
    moe = dataclasses.replace(model, moe={"num_experts": 4, "top_k": 2, "expert_ffn_size": 64})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dense models"):
        check_plan(moe, _plan(dp=4, global_batch=4))
