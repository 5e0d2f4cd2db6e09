"""torchtitan's per-op SAC (``selective_recompute="alternate-matmul"``) with TP + sequence
parallelism: the policy saves an op's output only if the op is in ``_save_list``
(torchtitan parallelisms/parallelize_llama.py@9dec370, unchanged in
models/llama3/parallelize_llama.py@820504e), which names ``_c10d_functional.reduce_scatter_tensor``
but no all-gather. Every collective of a block's forward that is not saved runs again in the
recomputation: the sequence-parallel all-gathers of the attention's and the MLP's inputs. The
weight gradients then use those recomputed inputs (no further re-gather in the backward)."""

from __future__ import annotations

from collections import Counter

import pytest

from core.groups import TP
from schedules.layer_ops import backward_weight_ops, forward_ops, layer_shape, recompute_ops
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan

# torchtitan's _save_list (9dec370), the collectives in it as the simulator names their kinds
SAVE_LIST = {"aten.mm.default", "aten._scaled_dot_product_efficient_attention.default",
             "aten._scaled_dot_product_flash_attention.default",
             "_c10d_functional.reduce_scatter_tensor.default", "aten.abs.default", "aten.max.default"}
SAVED_COLLECTIVES = {"reduce_scatter"} if "_c10d_functional.reduce_scatter_tensor.default" in SAVE_LIST else set()


def _plan(**fields: object) -> ParallelPlan:
    base: dict[str, object] = dict(framework="torch", tp=4, dp=2, sequence_parallel=True, recompute="selective",
                                   selective_recompute="alternate-matmul", global_batch=2)
    return ParallelPlan(**{**base, **fields})  # type: ignore[arg-type]


def _collectives(ops: tuple) -> Counter:  # type: ignore[type-arg]
    return Counter(op.kind for op in ops if op.lane == "comm.tp")


def test_recomputation_redoes_the_unsaved_forward_collectives() -> None:
    model, plan = get_model("llama3-8b"), _plan()
    shape = layer_shape(model, plan)
    forward = _collectives(forward_ops(plan, shape, 0))
    assert forward == {"all_gather": 2, "reduce_scatter": 2}  # SP: gather each sub-block's input, scatter its output
    expected = Counter({kind: n for kind, n in forward.items() if kind not in SAVED_COLLECTIVES})
    recompute = recompute_ops(plan, shape, 0)
    assert _collectives(recompute) == expected == {"all_gather": 2}
    gathers = [op for op in recompute if op.lane == "comm.tp"]
    assert all(op.bytes == shape.hidden_bytes and op.dim == TP for op in gathers)
    # each gather comes before the recomputed matmul it feeds (k: attention side, w3: MLP side)
    names = [op.name for op in recompute]
    assert names.index("L0.attn.sp_ag.recompute") < names.index("L0.k.recompute") \
        < names.index("L0.mlp.sp_ag.recompute") < names.index("L0.w3.recompute")


def test_the_weight_gradients_use_the_recomputed_inputs() -> None:
    model = get_model("llama3-8b")
    sac = _plan()
    assert not any("sp_regather" in op.name for op in backward_weight_ops(sac, layer_shape(model, sac), 0))
    plain = _plan(recompute="none")  # without the recomputation the backward still re-gathers, as before
    assert any("sp_regather" in op.name for op in backward_weight_ops(plain, layer_shape(model, plain), 0))


@pytest.mark.parametrize("fields", [dict(sequence_parallel=False), dict(tp=1, sequence_parallel=False),
                                    dict(selective_recompute="attention")])
def test_no_collective_is_recomputed_without_sequence_parallel_sac(fields: dict[str, object]) -> None:
    model, plan = get_model("llama3-8b"), _plan(**fields)
    assert not _collectives(recompute_ops(plan, layer_shape(model, plan), 0))


def test_the_recomputed_matmuls_are_unchanged() -> None:
    model = get_model("llama3-8b")
    sp, no_sp = _plan(), _plan(sequence_parallel=False)
    compute = [op.name for op in recompute_ops(sp, layer_shape(model, sp), 3) if op.lane == "compute"]
    assert compute == [op.name for op in recompute_ops(no_sp, layer_shape(model, no_sp), 3)]
    # every second matmul of q, k, v, wo, w1, w3, w2 (torch keeps the projections separate)
    assert [n for n in compute if "_res" not in n] == ["L3.k.recompute", "L3.proj.recompute", "L3.w3.recompute"]
