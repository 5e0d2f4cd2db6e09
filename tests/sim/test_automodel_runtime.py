"""NeMo AutoModel's runtime as the simulator runs it: FSDP2 under torch.distributed.pipelining (the
"torch" runtime), DeepEP's host wait and the eager YaRN RoPE on it, and pipeline sends that
slow compute only while they move data."""

from __future__ import annotations

import numpy as np
import pytest

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Lane
from profiler.validate.published.frameworks import framework_for
from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.rows import read_rows
from schedules.attention import AttentionSpec
from schedules.attention_ops import model_layer_shape
from schedules.builder import build_task_graph
from schedules.elementwise import ELEMENTWISE_PASSES
from schedules.model import ModelSpec
from schedules.moe import MoESpec
from schedules.moe_kernels import (
    ROPE_PASSES,
    TORCH_FP32_ROPE_PASSES,
    flex_sink_glue_bytes,
    mla_glue_bytes,
)
from schedules.moe_sizes import moe_shape
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.costing import layout_ops
from sim.interference import pipeline_busy
from tests.sim.test_moe_host_sync import TINY

ROWS = "docs/published-moe-runs.toml"


def _model(rope_scaling: str = "none") -> ModelSpec:
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_size=128, rope_scaling=rope_scaling)
    return ModelSpec(name="tiny-moe", ffn_kind="swiglu", moe=moe, **TINY)  # type: ignore[arg-type]


def _names(plan: ParallelPlan, model: ModelSpec, kind: str | None = None) -> list[str]:
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)
    return [op.name for t in graph.tasks if t.rank == 0 and (kind is None or t.kind == kind) for op in t.ops]


def test_automodel_rows_run_fsdp2_under_torch_pipelining_as_its_parallelizer_does():
    """parallelizer.py apply_fsdp @ 01926a5c: fully_shard per block with reduce_dtype float32;
    torch.optim.Adam (foreach); DeepEP; the runtime is torch's, for every AutoModel row."""
    framework = framework_for("NeMo AutoModel (FSDP2, TE, DeepEP)")
    assert framework.preset == "fsdp2" and "apply_fsdp" in framework.source
    rows = [r for r in read_rows(ROWS) if "automodel" in r.framework.lower()]
    assert len(rows) == 6  # DeepSeek-V3 (2), Kimi K2, Qwen3-30B-A3B, GPT-OSS-120B and -20B
    for row in rows:
        plan = job_for_row(row).job.plan
        assert (plan.framework, plan.grad_reduce_dtype, plan.moe_dispatcher) == ("torch", "fp32", "deepep")
        assert plan.optimizer == "foreach" and plan.fused_elementwise
    megatron = [r for r in read_rows(ROWS) if "megatron-bridge" in r.framework.lower()]
    assert megatron and all(job_for_row(r).job.plan.framework == "megatron" for r in megatron)


def test_deepep_waits_on_the_host_on_the_torch_runtime_too():
    """FusedDispatch.forward (fused_a2a.py @ 01926a5c) dispatches without a cached handle in every
    forward and recomputed forward; the backward reuses the handle; no EP, no dispatch, no wait."""
    model = _model()
    plan = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", moe_dispatcher="deepep", recompute="full")
    forward = _names(plan, model, "fwd")
    assert sum(n.endswith("moe.host_sync") for n in forward) == 4  # one per MoE layer
    backward = _names(plan, model, "bwd")
    assert sum(n.endswith("moe.host_sync.recompute") for n in backward) == 4
    assert not any("host_sync" in n for n in _names(ParallelPlan(dp=4, global_batch=4, framework="torch",
                                                                 moe_dispatcher="deepep"), model))
    alltoall = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch")
    assert not any("host_sync" in n for n in _names(alltoall, model))


def test_yarn_rope_is_eager_where_the_layer_prices_a_fused_one():
    """GPT-OSS's YaRN RoPE runs eagerly in both stacks: an extra op where the layer's own pricing
    assumed a fused RoPE (megatron; torch with fused element-wise kernels), none where the layer
    already prices eager RoPE passes, none without YaRN."""
    yarn = _model("yarn")

    def ropes(plan: ParallelPlan, model: ModelSpec = yarn) -> int:
        return sum(n.endswith("attn.rope") for n in _names(plan, model, "fwd"))

    assert ropes(ParallelPlan(dp=4, ep=4, global_batch=4)) == 4
    assert ropes(ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", elementwise="fused")) == 4
    assert ropes(ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", elementwise="eager")) == 0
    assert ropes(ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", elementwise="fused"), _model()) == 0


def _task(lane: str, kind: str) -> Task:
    return Task(rank=0, lane=lane, kind=kind, name=kind, ops=(Op(lane, kind, kind, kind, bytes=1.0),))


def test_pipeline_sends_slow_compute_only_while_they_move_data():
    """A send held open until the step's end (torch's runtime schedules wait for sends then) counts
    from its start for its priced duration; a receive posted early counts for the duration
    before its end; other communication keeps its span."""
    tasks = [_task(Lane.PP, "send"), _task(Lane.PP, "recv"), _task(Lane.DP, "reduce_scatter"),
             _task(Lane.PP, "send")]
    start = np.array([1.0, 0.0, 2.0, 5.0])
    end = np.array([9.0, 6.0, 7.0, 5.5])
    duration = np.array([0.5, 0.25, 1.0, 0.5])
    s, e = pipeline_busy(TaskGraph.of(tasks, [()] * len(tasks)), start, end, duration)
    assert list(s) == [1.0, 5.75, 2.0, 5.0]
    assert list(e) == [1.5, 6.0, 7.0, 5.5]  # the DP reduction waits for its peers: its span stays
    assert list(start) == [1.0, 0.0, 2.0, 5.0] and list(end) == [9.0, 6.0, 7.0, 5.5]  # inputs untouched


def test_mla_glue_counts_automodels_eager_passes():
    """DeepSeek-V3's heads (d_nope 128, d_rope 64, d_v 128) in bf16: forward the fp32 complex RoPE
    on q_pe (2*2 + 16) * 64 = 1280, the two 192-wide concatenations 2 * 768, the value's copy 512;
    backward the RoPE's 1280, q's split gradient 768, k_pe's head sum 128, kv's split gradient
    1024 (bytes per head and token)."""
    assert mla_glue_bytes(2, 128, 64, 128) == (3328.0, 3200.0)


def _mla_model() -> ModelSpec:
    mla = AttentionSpec(head_dim=48, v_head_dim=32, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16)
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_size=128, attention=mla)
    return ModelSpec(name="tiny-mla", ffn_kind="swiglu", moe=moe, **TINY)  # type: ignore[arg-type]


def test_mla_glue_runs_on_the_torch_runtime_around_the_attention():
    """After the projections in every forward (and recomputed forward), before their gradients
    in backward; Megatron-Core's MLA (fused RoPE) has none, nor does ordinary attention."""
    full = dict(dp=4, ep=4, global_batch=4, recompute="full")
    torch = ParallelPlan(framework="torch", **full)  # type: ignore[arg-type]
    forward = _names(torch, _mla_model(), "fwd")
    assert sum(n.endswith("attn.glue") for n in forward) == 4
    i = forward.index("L0.attn.glue")
    assert forward[i - 1].startswith("L0.kv_up") and forward[i + 1].startswith("L0.attn")
    backward = _names(torch, _mla_model(), "bwd")
    assert sum(n.endswith("attn.glue.recompute") for n in backward) == 4
    assert sum(n.endswith("attn.glue.dgrad") for n in backward) == 4
    assert not any("attn.glue" in n for n in _names(ParallelPlan(**full), _mla_model()))  # type: ignore[arg-type]
    assert not any("attn.glue" in n for n in _names(torch, _model()))


def test_mla_glue_replaces_the_layers_rope_estimate():
    """The op's bytes are the glue's less the layer's own RoPE passes over q and k."""
    model = _mla_model()
    plan = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", elementwise="fused")
    shape = moe_shape(model, plan, 1)
    tokens, heads = model.seq_len, model.num_heads
    rope = ELEMENTWISE_PASSES["fused"]["rope"]
    per = mla_glue_bytes(2, 32, 16, 32)
    rope_heads = heads + model.kv_heads
    assert shape.attn_glue == (per[0] * tokens * heads - rope[0] * 2 * tokens * rope_heads * model.head_dim,
                              per[1] * tokens * heads - rope[1] * 2 * tokens * rope_heads * model.head_dim)


def test_flex_sink_glue_counts_automodels_eager_passes():
    """Per query element in bf16: forward the q and output transposes (4 + 4) and the sinks'
    fp32 rescale and cast back (6 + 6); backward the cast's, product's and scale's gradients
    (6 + 8 + 6 + 6) and q's copy (4); k and v: 4 each way."""
    assert flex_sink_glue_bytes(2, 1.0, 0.0) == (20.0, 30.0)
    assert flex_sink_glue_bytes(2, 0.0, 1.0) == (8.0, 8.0)


def test_sinks_glue_on_the_torch_runtime_only():
    sinks = AttentionSpec(head_dim=16, sinks=True)
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_size=128, attention=sinks)
    model = ModelSpec(name="tiny-sinks", ffn_kind="swiglu", moe=moe, **TINY)  # type: ignore[arg-type]
    torch = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch")
    shape = moe_shape(model, torch, 0)
    q, kv = model.seq_len * model.num_heads * 16, model.seq_len * model.kv_heads * 16
    assert shape.attn_glue == flex_sink_glue_bytes(2, q, kv)
    assert sum(n.endswith("attn.glue") for n in _names(torch, model, "fwd")) == 4
    assert moe_shape(model, ParallelPlan(dp=4, ep=4, global_batch=4), 0).attn_glue == (0.0, 0.0)


def test_torch_runtime_yarn_rope_is_automodels_fp32_one():
    """AutoModel's GPT-OSS apply_rotary_emb works in fp32: 24 passes of the bf16 tensor forward,
    26 backward, and its cos/sin come once per forward (no per-layer frequency passes); Megatron's
    stays at 12/10 with the frequencies."""
    yarn = _model("yarn")
    torch = moe_shape(yarn, ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", elementwise="fused"), 0)
    megatron = moe_shape(yarn, ParallelPlan(dp=4, ep=4, global_batch=4), 0)
    assert torch.rope_passes == TORCH_FP32_ROPE_PASSES == (24.0, 26.0) and torch.rope_freq_bytes == 0.0
    assert megatron.rope_passes == ROPE_PASSES and megatron.rope_freq_bytes > 0
    assert torch.rope_bytes == megatron.rope_bytes > 0
    fwd, bwd = torch.rope("fwd", 0)[-1], torch.rope("bwd", 0, backward=True)[-1]
    assert (fwd.bytes, bwd.bytes) == (24.0 * torch.rope_bytes, 26.0 * torch.rope_bytes)


def test_shared_experts_run_beside_the_deepep_dispatch_on_the_torch_runtime():
    """AutoModel's MoE.forward issues the shared experts on a side stream before the dispatch:
    their kernels come before it and the dispatch runs beside them (the pair takes the longer);
    Megatron-Core's order (shared experts after the combine, in line) is unchanged."""
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_size=128, num_shared_experts=1)
    model = ModelSpec(name="tiny-shared", ffn_kind="swiglu", moe=moe, **TINY)  # type: ignore[arg-type]
    plan = ParallelPlan(dp=4, ep=4, global_batch=4, framework="torch", moe_dispatcher="deepep")
    shape = moe_shape(model, plan, 0)
    ops = shape.forward(plan, model_layer_shape(model, plan, 0), 0)
    names = [op.name.split(".", 1)[1] for op in ops]
    d = names.index("dispatch")
    shared = [op for op in ops[:d] if op.name.split(".", 1)[1].startswith("shared.")]
    assert [op.name.split(".", 1)[1] for op in shared] == ["shared.w1", "shared.w3", "shared.act", "shared.fc2"]
    assert ops[d].concurrent and ops[d].beside == 4
    assert not any(n.startswith("shared.") for n in names[d:])
    for a2a, extra in ((1.0, 0.0), (2.0, 1.0)):  # hidden behind the shared experts' 4 x 0.25 s, or not
        costed = layout_ops(ops, [a2a if op.name.endswith("dispatch") else 0.25 for op in ops])
        assert costed.duration_s == pytest.approx(0.25 * (len(ops) - 1) + extra)
    megatron = ParallelPlan(dp=4, ep=4, global_batch=4, moe_dispatcher="deepep")
    inline = moe_shape(model, megatron, 0).forward(megatron, model_layer_shape(model, megatron, 0), 0)
    assert not any(op.concurrent for op in inline)
    assert [op.name.split(".", 1)[1] for op in inline][-1].startswith("shared.")
