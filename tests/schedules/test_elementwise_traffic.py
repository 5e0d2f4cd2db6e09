"""Element-wise memory traffic per block and gradient accumulation across micro-batches.

Ground truth: the reads and writes of the kernels each piece runs (fused kernels for
Megatron-LM / Transformer Engine; PyTorch's eager ops and their autograd formulas for the
included trainer, see ``schedules/layer_ops.py``), written out here per model, and the
semantics of autograd's ``AccumulateGrad`` (``grad += new`` for every micro-batch but the first).
The measured side: the committed one-rank trainer runs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from schedules.builder import BuildOptions, build_task_graph
from schedules.layer_ops import layer_shape
from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.stages import plan_stages

ROOT = Path(__file__).resolve().parents[2]


def _units(model, plan):  # type: ignore[no-untyped-def]
    """(H, F, QK): bytes of one [tokens, h] activation, of one [tokens, ffn/tp] and of q plus k."""
    tokens = plan.microbatch_size * model.seq_len
    e = plan.element_bytes
    qk = e * tokens * (model.num_heads + model.kv_heads) * model.head_dim / plan.tp
    return e * tokens * model.hidden_size, e * tokens * model.ffn / plan.tp, qk


def test_fused_kernels_llama() -> None:
    """Llama (RMSNorm, SwiGLU, RoPE, no dropout): forward 2 norms x 2 + 2 adds x 3 + SwiGLU 3
    + RoPE 2; backward 2 x 3 + 2 x 3 + 5 + 2."""
    model, plan = get_model("llama3-8b"), ParallelPlan(tp=2, global_batch=8)
    h, f, qk = _units(model, plan)
    shape = layer_shape(model, plan)
    assert shape.elementwise_bytes == pytest.approx(10 * h + 3 * f + 2 * qk)
    assert shape.elementwise_bwd_bytes == pytest.approx(12 * h + 5 * f + 2 * qk)


def test_fused_kernels_gpt() -> None:
    """GPT-3 (LayerNorm, GELU, dropout, learned positions): forward 4 + 6 + 2 x 3 (dropouts) +
    GELU 2; backward 6 + 6 + 2 x 2.5 + 3."""
    model, plan = get_model("gpt3-175b"), ParallelPlan(tp=8, global_batch=8)
    h, f, _ = _units(model, plan)
    shape = layer_shape(model, plan)
    assert shape.elementwise_bytes == pytest.approx(16 * h + 2 * f)
    assert shape.elementwise_bwd_bytes == pytest.approx(17 * h + 3 * f)


def test_eager_ops_of_the_trainer() -> None:
    """framework="torch" (eager PyTorch): RMSNorm 7 passes forward, 21 backward; SwiGLU 5 and 9;
    RoPE 9 and 10; residual adds 3 and 3."""
    model = get_model("small-wide")
    plan = ParallelPlan(framework="torch", dtype="fp32", global_batch=4)
    h, f, qk = _units(model, plan)
    shape = layer_shape(model, plan)
    assert shape.elementwise_bytes == pytest.approx(2 * 7 * h + 2 * 3 * h + 5 * f + 9 * qk)
    assert shape.elementwise_bwd_bytes == pytest.approx(2 * 21 * h + 2 * 3 * h + 9 * f + 10 * qk)


def _accumulated_bytes(framework: str, dtype: str = "fp32", **fields) -> tuple[dict[tuple[int, int], float], list]:  # type: ignore[no-untyped-def]
    plan = ParallelPlan(framework=framework, dtype=dtype, **fields)
    model = get_model("tiny")
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: tp + plan.tp * (dp + plan.dp * pp),
                             BuildOptions(folded=False, steps=2))
    out: dict[tuple[int, int], float] = {}
    for task in graph.tasks:
        for op in task.ops:
            if op.name.endswith("grad_accumulate"):
                out[(task.rank, task.step)] = out.get((task.rank, task.step), 0.0) + op.bytes
    return out, plan_stages(model, plan)


@pytest.mark.parametrize("fields", [
    {"pp": 2, "global_batch": 4, "schedule": "1f1b"},
    {"pp": 2, "vpp": 2, "global_batch": 4, "schedule": "interleaved"},
    {"pp": 2, "global_batch": 4, "schedule": "zb-h1"},
    {"dp": 2, "global_batch": 8, "zero": 3},
])
def test_gradient_accumulation_is_three_passes_per_later_microbatch(fields: dict) -> None:
    """Each rank adds (m - 1) micro-batches' gradients of all its parameters into .grad, every
    step: 3 x (m - 1) x its local parameter bytes (4-byte floats)."""
    accumulated, stages = _accumulated_bytes("torch", **fields)
    plan = ParallelPlan(framework="torch", dtype="fp32", **fields)
    m = plan.num_microbatches
    chunks = plan.pp * plan.vpp
    for rank_pp in range(plan.pp):
        params = sum(stages[chunk].params_local for chunk in range(chunks) if chunk % plan.pp == rank_pp)
        for step in range(2):
            rank = plan.dp * plan.tp * rank_pp  # the first rank of the pipeline stage
            assert accumulated[(rank, step)] == pytest.approx(3 * (m - 1) * 4 * params)


def test_megatron_fuses_gradient_accumulation_into_the_gemm() -> None:
    accumulated, _ = _accumulated_bytes("megatron", pp=2, global_batch=4, schedule="1f1b")
    assert accumulated == {}


@pytest.mark.parametrize("fields", [
    {"pp": 2, "global_batch": 4, "schedule": "1f1b"},
    {"pp": 2, "vpp": 2, "global_batch": 4, "schedule": "interleaved"},
    {"dp": 2, "global_batch": 8},
])
def test_bf16_optimizer_copies_every_microbatch_gradient_to_fp32(fields: dict) -> None:
    """DeepSpeed's BF16_Optimizer (bf16_optimizer.py @v0.6.5 l.390-407): after every backward,
    the first micro-batch's too, each bf16 gradient is cast to fp32 (read 2, write 4 bytes)
    and added into the fp32 buffer (read 4 + 4, write 4): 18 bytes per local parameter per
    micro-batch, m micro-batches a step."""
    accumulated, stages = _accumulated_bytes("megatron", "bf16", grad_accumulation="fp32-copy", **fields)
    plan = ParallelPlan(dtype="bf16", **fields)
    m, chunks = plan.num_microbatches, plan.pp * plan.vpp
    for rank_pp in range(plan.pp):
        params = sum(stages[chunk].params_local for chunk in range(chunks) if chunk % plan.pp == rank_pp)
        rank = plan.dp * plan.tp * rank_pp
        for step in range(2):
            assert accumulated[(rank, step)] == pytest.approx((2 + 4 + 4 + 4 + 4) * m * params)


def test_megatron_2021_accumulates_fp16_gradients_through_autograd() -> None:
    """Megatron-LM 2021's fp16 runs (local DDP without contiguous buffers; no gradient accumulation
    fusion before 2022-02-16): autograd's grad += new in fp16 from the second micro-batch on,
    3 passes of 2 bytes over each rank's local parameters per later micro-batch."""
    from schedules.frameworks import get_framework

    fields = {**get_framework("megatron-2021").plan_fields(), "pp": 2, "global_batch": 4, "schedule": "1f1b"}
    assert fields["grad_accumulation"] == "autograd"
    framework = fields.pop("framework")
    accumulated, stages = _accumulated_bytes(framework, "bf16", **fields)  # fp16 runs as bf16: 2 bytes either way
    m = ParallelPlan(**{**fields, "framework": framework}).num_microbatches
    for rank_pp in range(2):
        rank = rank_pp  # tp 1, dp 1
        assert accumulated[(rank, 0)] == pytest.approx(3 * (m - 1) * 2 * stages[rank_pp].params_local)


def test_grad_accumulation_auto_follows_the_runtime() -> None:
    """"auto": fused into the GEMM on the megatron runtime, autograd's grad += new on torch."""
    assert ParallelPlan(framework="megatron").grad_accumulation_kind == "fused"
    assert ParallelPlan(framework="torch").grad_accumulation_kind == "autograd"
    accumulated, _ = _accumulated_bytes("megatron", "bf16", grad_accumulation="auto", pp=2, global_batch=4,
                                        schedule="1f1b")
    assert accumulated == {}


def test_published_bf16_optimizer_rows_get_its_behaviour() -> None:
    """A published run naming DeepSpeed's BF16_Optimizer (BLOOM) accumulates in fp32 copies and
    reduces the fp32 buffers; a plain DeepSpeed row keeps the preset's choices."""
    from profiler.validate.published.frameworks import framework_for

    for text in ("Megatron-DeepSpeed (bigscience fork) + DeepSpeed BF16_Optimizer", "DeepSpeed BF16_Optimizer"):
        fields = framework_for(text).plan_fields()
        assert (fields["grad_accumulation"], fields["grad_reduce_dtype"]) == ("fp32-copy", "fp32")
    assert framework_for("DeepSpeed 0.6.2 + Megatron-DeepSpeed").plan_fields().get("grad_accumulation", "auto") == "auto"


@pytest.mark.parametrize("run", ["calib-ws1-wide", "calib-ws1-small"])
def test_measured_accumulate_grad_is_paid_from_the_second_microbatch(run: str) -> None:
    """The trainer's traces: ``AccumulateGrad`` of the first micro-batch of a step only stores
    the gradient (cheap); every later one adds it in (the op the model adds)."""
    from profiler.validate.measured import load_measured

    spans = pd.concat([r.timeline.spans for r in load_measured(ROOT / "traces" / run).recordings])
    acc = spans[spans["name"].astype(str).str.contains("AccumulateGrad")]
    per_mb = (acc["end_s"] - acc["start_s"]).groupby([acc["step"], acc["microbatch"]]).sum().groupby(level=1).median()
    assert per_mb[0] < 0.25 * per_mb[per_mb.index > 0].median(), per_mb.to_dict()


@pytest.mark.parametrize(("zero", "share"), [(0, 1), (1, 2), (3, 2)])
def test_trainer_adamw_is_the_single_tensor_loop(zero: int, share: int) -> None:
    """torch.optim.AdamW over CPU tensors (the trainer on CPU hosts, gloo): lerp_ 3 + mul_ 2 +
    addcmul_ 3 + sqrt, div, add_ 6 + addcdiv_ 4 = 18 passes over each (owned) parameter, 4-byte
    floats (on GPUs torch's foreach kernels run instead, schedules.optimizer_traffic)."""
    plan = ParallelPlan(framework="torch", dtype="fp32", dp=2, zero=zero, global_batch=4)
    model = get_model("tiny")
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: dp,
                             BuildOptions(folded=False, gloo_host=True))
    optimizer = sum(op.bytes for t in graph.tasks if t.rank == 0 and t.kind == "optimizer" for op in t.ops
                    if op.op_class == "optimizer")
    assert optimizer == pytest.approx(18 * 4 * plan_stages(model, plan)[0].params_local / share)


def test_measured_adamw_runs_those_ops_per_parameter() -> None:
    """The committed one-rank trace: per step, the optimizer runs lerp_, mul_, addcmul_, sqrt,
    div, add_ (eps), addcdiv_ once per parameter tensor (the single-tensor loop, not foreach)."""
    from profiler.validate.measured import load_measured

    spans = load_measured(ROOT / "traces" / "calib-ws1-wide").recordings[0].timeline.spans
    opt = spans[(spans["kind"].astype(str) == "optimizer") & (spans["rank"] == 0)]
    steps = opt["step"].nunique()
    counts = opt["name"].astype(str).value_counts() / steps
    tensors = counts["aten::lerp_"]
    assert tensors == 39  # 4 blocks x 9 tensors + embedding, final norm, head
    for name in ("aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div", "aten::addcdiv_"):
        assert counts[name] == tensors, name
