"""DeepSpeed v0.6.2's coalesced ZeRO-3 fetch: a submodule whose bias is partitioned too (at least
stage3_param_persistence_threshold = 1e5 elements; stage3.py l.1053 keeps ``ds_numel < threshold``
whole) gathers weight and bias into one flat buffer and rebuilds them with ``torch.cat``
(partition_parameters.py l.515-545, l.862-890): one device copy of the gathered bytes."""

from __future__ import annotations

from core.vocab import OpClass
from schedules.builder import BuildOptions, build_task_graph
from schedules.model import ModelSpec
from schedules.passes.zero3_fetch import (
    PERSISTENCE_THRESHOLD,
    coalesced_fetch,
    layer_biases,
    module_fetches,
)
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan


def _gpt(hidden: int, ffn: int, bias: bool = True) -> ModelSpec:
    return ModelSpec(num_layers=2, hidden_size=hidden, num_heads=32, vocab_size=50257, seq_len=1024,
                     ffn_hidden_size=ffn, bias=bias)


def _plan(tp: int = 1) -> ParallelPlan:
    return ParallelPlan(tp=tp, dp=8, global_batch=8, zero=3, zero3_unit="module", recompute="full")


def test_the_threshold_is_strict_as_in_persistent_parameters():
    # ds_numel < 1e5 stays whole: a bias of exactly 1e5 elements is partitioned
    assert coalesced_fetch(_gpt(4096, PERSISTENCE_THRESHOLD), 1, "fc1")
    assert not coalesced_fetch(_gpt(4096, PERSISTENCE_THRESHOLD - 4), 1, "fc1")


def test_gpt_1t_and_2t_fc1_biases_are_gathered_530b_and_175b_not():
    # FFN widths of the DeepSpeed-Azure configs: 49,152 (175B), 81,920 (530B), 102,400 (1T), 131,072 (2T)
    for ffn, expected in ((49152, False), (81920, False), (102400, True), (131072, True)):
        fetches = module_fetches(_gpt(ffn // 4, ffn), _plan(), "B")
        assert {f.name.split(".")[0] for f in fetches if f.coalesced} == ({"fc1"} if expected else set())


def test_tp_splits_column_parallel_biases_and_no_bias_means_no_copy():
    assert layer_biases(_gpt(32768, 131072), 2)["fc1"] == 65536  # under 1e5 on each TP rank
    assert not coalesced_fetch(_gpt(32768, 131072), 2, "fc1")
    assert layer_biases(_gpt(32768, 131072), 2)["fc2"] == 32768  # row parallel: whole
    assert not coalesced_fetch(_gpt(32768, 131072, bias=False), 1, "fc1")


def test_the_gather_task_ends_with_a_copy_of_twice_its_bytes():
    model, plan = _gpt(1024, 131072), _plan()
    graph = build_task_graph(model, plan, build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp),
                             lambda tp, cp, dp, pp: dp, BuildOptions(folded=True))
    gathers = [t for t in graph.tasks if t.rank == 0 and t.lane == "comm.dp" and t.name.endswith("_ag")]
    split = [t for t in gathers if ".fc1" in t.name]  # the forward's, the recomputation's, the backward's
    assert {t.name.split(".", 1)[1] for t in split} == {"fc1_ag", "fc1.recompute_ag"}
    assert all(t.ops[-1].op_class == OpClass.ELEMENTWISE and t.ops[-1].bytes == 2 * t.ops[0].bytes for t in split)
    assert all(len(t.ops) == 1 for t in gathers if ".fc1" not in t.name)
