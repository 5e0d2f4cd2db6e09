"""Framework presets and the stack behaviours they switch, each against its documented rule."""

from __future__ import annotations

import dataclasses

import pytest

from schedules.builder import BuildOptions, build_task_graph
from schedules.frameworks import FRAMEWORK_PRESETS, get_framework
from schedules.layer_ops import forward_ops, layer_shape, recompute_ops
from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.stage_ops import EAGER_ADAMW_PASSES, adam_bytes_per_param
from sim.costing import layout_ops


@pytest.mark.parametrize("name", sorted(FRAMEWORK_PRESETS))
def test_every_preset_is_a_valid_plan_with_a_source_for_each_choice(name: str) -> None:
    preset = get_framework(name)
    plan = ParallelPlan(tp=2, dp=2, global_batch=8, **{"sequence_parallel": True, **preset.plan_fields()})
    assert plan.framework in ("megatron", "torch")
    assert set(preset.plan_fields()) <= set(preset.sources)
    assert all(preset.sources[k].strip() for k in preset.plan_fields())


def test_nemo_trains_with_the_distributed_optimizer_and_sequence_parallelism() -> None:
    """NeMo/Megatron-Bridge recipes: use_distributed_optimizer=True, sequence_parallel = tp > 1;
    a job's own --zero / --no-sequence-parallel still win, and SP at TP 1 changes nothing."""
    fields = get_framework("nemo").plan_fields()
    assert (fields["zero"], fields["sequence_parallel"]) == (1, True)
    model = get_model("tiny")
    graphs = []
    for sp in (True, False):
        plan = ParallelPlan(tp=1, dp=2, global_batch=4, **{**fields, "sequence_parallel": sp})
        schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
        graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: dp, BuildOptions(folded=True))
        graphs.append([(t.rank, t.kind, tuple(op.bytes for op in t.ops)) for t in graph.tasks])
    assert graphs[0] == graphs[1]


def test_torchtitan_tensor_parallelism_is_sequence_parallel() -> None:
    """torchtitan's apply_tp shards the activations between blocks over the sequence (SequenceParallel
    norms, Shard(1)): the preset turns SP on, and a job's --no-sequence-parallel still wins."""
    from sim.job import resolve_job

    preset = get_framework("torchtitan")
    assert preset.plan_fields()["sequence_parallel"] is True
    assert "apply_tp" in preset.sources["sequence_parallel"]
    base = {"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "dp": 4, "global_batch": 8,
            "framework_preset": "torchtitan"}
    assert resolve_job(base).plan.sequence_parallel
    assert not resolve_job({**base, "sequence_parallel": False}).plan.sequence_parallel


def test_an_unknown_preset_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="megatron-core") as info:
        get_framework("megatron-2019")
    assert "torchtitan" in str(info.value)


def test_the_default_plan_is_megatron_core() -> None:
    default, preset = ParallelPlan(), ParallelPlan(**get_framework("megatron-core").plan_fields())
    for field in ("framework", "flash_attention", "overlap_grad_reduce", "overlap_param_gather",
                  "selective_recompute", "zero3_unit"):
        assert getattr(default, field) == getattr(preset, field)
    assert default.fused_elementwise and default.fused_optimizer


def test_optimizer_traffic_by_stack() -> None:
    # Megatron: fused Adam (7 fp32 passes, 28 B), main -> bf16 model copy (6 B), zeroing the
    # fp32 grad buffer (4 B), the clip's norm read (4 B, not clipped); torch: fused AdamW 28 B
    # or foreach 21 fp32 passes (84 B), and clip_grad_norm_'s norm + scaling (12 B); the
    # included trainer on CPUs: the single-tensor loop's 18 passes, no clipping
    assert adam_bytes_per_param(ParallelPlan()) == 34 + 4
    assert adam_bytes_per_param(ParallelPlan(framework="torch", optimizer="fused")) == 28 + 12
    assert adam_bytes_per_param(ParallelPlan(framework="torch")) == 84 + 12
    assert adam_bytes_per_param(ParallelPlan(framework="torch", dtype="fp32"), host_loop=True) == EAGER_ADAMW_PASSES * 4


def test_alternate_matmul_recomputes_every_second_forward_matmul() -> None:
    # torchtitan's per-op SAC on Llama (wq, wk, wv, wo, w1, w3, w2 in call order) recomputes
    # wk, wo and w3 and all the element-wise work, but not the attention core
    model = get_model("llama3-8b")
    plan = ParallelPlan(framework="torch", recompute="selective", selective_recompute="alternate-matmul")
    shape = layer_shape(model, plan)
    ops = recompute_ops(plan, shape, layer=0)
    assert [op.name for op in ops if op.op_class == "gemm"] == ["L0.k.recompute", "L0.proj.recompute",
                                                                "L0.w3.recompute"]
    assert not any(op.op_class == "attention" for op in ops)
    ew = sum(op.bytes for op in forward_ops(plan, shape, 0) if op.op_class == "activation")
    assert sum(op.bytes for op in ops if op.op_class == "activation") == pytest.approx(ew)
    h, kv, f, t = model.hidden_size, model.kv_size, model.ffn, model.seq_len
    assert sum(op.flops for op in ops) == pytest.approx(2 * t * (h * kv + h * h + h * f))


def test_tp_comm_overlap_runs_each_sp_collective_beside_its_matmul() -> None:
    model = get_model("llama3-8b")
    base = ParallelPlan(tp=4, dp=1, global_batch=1, sequence_parallel=True)
    plain = forward_ops(base, layer_shape(model, base), 0)
    over_plan = dataclasses.replace(base, tp_comm_overlap=True)
    over = forward_ops(over_plan, layer_shape(model, over_plan), 0)
    assert sorted(op.name for op in plain) == sorted(op.name for op in over)
    comm = [op for op in over if op.lane == "comm.tp"]
    assert comm and all(op.concurrent for op in comm)
    # with unit-free durations: a matmul of 3 beside a collective of 5, pipelined in tp = 4 chunks,
    # takes 5 + 3/4 (sim.costing.layout_ops): each pair saves 3 - 3/4 of the serial 8
    durations = [5.0 if op.lane == "comm.tp" else 3.0 for op in over]
    pairs = sum(1 for op in over if op.lane == "comm.tp")
    serial = layout_ops(plain, [5.0 if op.lane == "comm.tp" else 3.0 for op in plain]).duration_s
    assert layout_ops(over, durations).duration_s == pytest.approx(serial - (3.0 - 3.0 / 4) * pairs)


def _graph(**fields):  # type: ignore[no-untyped-def]
    plan = ParallelPlan(**fields)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return build_task_graph(get_model("gpt3-1.7b"), plan, schedule, lambda tp, cp, dp, pp: dp,
                            BuildOptions(folded=True))


def test_deepspeed_zero3_gathers_each_weight_matrix() -> None:
    model = get_model("gpt3-1.7b")
    block = _graph(dp=8, global_batch=8, zero=3)
    module = _graph(dp=8, global_batch=8, zero=3, zero3_unit="module")
    gathers = [t for t in module.tasks if t.kind == "all_gather"]
    per_block = [t for t in block.tasks if t.kind == "all_gather"]
    # the weight matrices of every layer in forward and backward (+ embedding and head), and
    # the same bytes as the block-wise gathers less the persistent norms and biases
    assert len(gathers) == 2 * 4 * model.num_layers + 4
    small = 2 * model.num_layers * 2 * (model.layer_params() - 12 * model.hidden_size ** 2)
    assert sum(t.ops[-1].bytes for t in gathers) == pytest.approx(
        sum(t.ops[-1].bytes for t in per_block) - small, rel=1e-9)


@pytest.mark.parametrize(("preset", "dtype", "per_param"), [
    ("megatron-core", "bf16", 4),  # arguments.py: bf16 forces accumulate_allreduce_grads_in_fp32
    ("torchtitan", "bf16", 4),     # mixed_precision_reduce = "float32"
    ("deepspeed", "bf16", 2),      # ZeRO communicates in the model dtype
    ("fsdp2", "bf16", 2),          # reduce_dtype=None: the compute dtype
    ("megatron-core", "fp32", 4),
])
def test_gradient_reductions_carry_the_stacks_dtype(preset: str, dtype: str, per_param: int) -> None:
    fields = {**get_framework(preset).plan_fields(), "dtype": dtype, "zero": 1}
    g = _graph(dp=2, global_batch=4, **fields)
    grads = [op for t in g.tasks if t.rank == 0 and t.lane == "comm.dp" and t.step == 0 for op in t.ops
             if op.kind in ("reduce_scatter", "all_reduce")]
    assert sum(op.bytes for op in grads) == pytest.approx(per_param * get_model("gpt3-1.7b").num_params(), rel=1e-6)


def test_auto_reduces_in_fp32_only_for_megatron_in_bf16() -> None:
    assert ParallelPlan().grad_reduce_bytes == 4
    assert ParallelPlan(framework="torch").grad_reduce_bytes == 2
    assert ParallelPlan(dtype="fp32", framework="torch").grad_reduce_bytes == 4
    assert ParallelPlan(grad_reduce_dtype="compute").grad_reduce_bytes == 2


def test_deepspeed_zero3_buffers_hold_its_largest_weight_matrix_not_a_layer() -> None:
    from schedules.passes.zero3_fetch import layer_modules
    from sim.memory import MemoryModel
    model = get_model("gpt3-1.7b")
    plans = {unit: ParallelPlan(dp=8, global_batch=8, zero=3, zero3_unit=unit) for unit in ("block", "module")}
    mems = {unit: MemoryModel(model, p, build_schedule(p.schedule, p.pp, p.num_microbatches, p.vpp))
            for unit, p in plans.items()}
    layer = mems["block"].stages[0].layer_params_local
    largest = max(params for _, params in layer_modules(model, 1))  # fc1: 4h x h
    assert largest == 4 * model.hidden_size ** 2
    # two gathered units and one unit of gradients, bf16
    assert mems["block"].buffers(0) - mems["module"].buffers(0) == pytest.approx(6 * (layer - largest))
