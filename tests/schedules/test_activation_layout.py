"""Sequence-parallel collectives under a batch-first activation layout (schedules/layer_comm.py
``_with_layout_copies``, ``ParallelPlan.activation_layout``): the copies PyTorch's functional
collectives make around a gather or scatter on dim 1, and where the simulator puts them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from core.vocab import Kind, OpClass
from schedules.frameworks import get_framework
from schedules.layer_ops import backward_input_ops, forward_ops, layer_shape
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan

MODEL = get_model("llama3-8b")


def _plan(**fields: object) -> ParallelPlan:
    base = {"framework": "torch", "tp": 4, "sequence_parallel": True, "global_batch": 4, "microbatch_size": 1}
    return ParallelPlan(**{**base, **fields})


def _copies(plan: ParallelPlan) -> tuple[list[tuple[str, str, float]], float]:
    shape = layer_shape(MODEL, plan)
    ops = forward_ops(plan, shape, 0) + backward_input_ops(plan, shape, 0, Kind.BWD)
    return [(op.name, op.kind, op.bytes) for op in ops if op.name.endswith(".cat")], shape.hidden_bytes


@pytest.mark.slow
def test_pytorch_functional_collectives_copy_around_a_gather_or_scatter_on_dim_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The fact, on this machine's PyTorch (one gloo rank): a reduce-scatter on dim 1 first
    concatenates its input's chunks (one aten::cat of the whole tensor); an all-gather on dim 1
    re-concatenates its result unless the batch is one sequence (PyTorch #169404's view)."""
    pytest.importorskip("torch")
    script = textwrap.dedent(f"""
        import torch, torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        from torch.utils._python_dispatch import TorchDispatchMode
        dist.init_process_group("gloo", init_method="file://{tmp_path}/pg", rank=0, world_size=1)
        group = dist.group.WORLD
        cats = []
        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {{}}))
                if func._schema.name.split("::")[-1] == "cat":
                    cats.append(sum(t.numel() for t in args[0]))
                return out
        for batch in (1, 2):
            x = torch.randn(batch, 64, 8)
            with Record():
                for out in (funcol.reduce_scatter_single(x, "sum", 1, group), funcol.all_gather_single(x, 1, group)):
                    out.wait() if hasattr(out, "wait") else out
            print(batch, cats)
            cats.clear()
        dist.destroy_process_group()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    lines = out.stdout.split("\n")
    assert lines[0] == "1 [512]"  # the reduce-scatter's input copied; the gather of one sequence is a view
    assert lines[1] == "2 [1024, 1024]"  # both copied for two sequences


@pytest.mark.parametrize("mbs", [1, 2])
def test_batch_first_layout_copies_the_full_activation_around_each_sp_collective(mbs: int) -> None:
    copies, hidden = _copies(_plan(activation_layout="bsh", microbatch_size=mbs, global_batch=4 * mbs))
    # forward: gather before attention and MLP (copy after), scatter after each (copy before);
    # backward: the reverse, each with its copy, in the pass's kind
    assert [name for name, _, _ in copies] == [
        "L0.attn.sp_ag.cat", "L0.attn.tp_rs.cat", "L0.mlp.sp_ag.cat", "L0.mlp.tp_rs.cat",
        "L0.mlp.tp_ag.cat", "L0.mlp.sp_rs.cat", "L0.attn.tp_ag.cat", "L0.attn.sp_rs.cat"]
    assert {kind for _, kind, _ in copies[:4]} == {Kind.FWD} and {kind for _, kind, _ in copies[4:]} == {Kind.BWD}
    assert all(nbytes == pytest.approx(2 * hidden) for _, _, nbytes in copies)  # read + write of the whole tensor


def test_the_copy_sits_between_the_collective_and_its_matmul() -> None:
    plan = _plan(activation_layout="bsh")
    ops = forward_ops(plan, layer_shape(MODEL, plan), 0)
    names = [op.name for op in ops]
    gather = names.index("L0.attn.sp_ag")
    assert names[gather + 1] == "L0.attn.sp_ag.cat" and ops[gather + 2].op_class == OpClass.GEMM
    scatter = names.index("L0.attn.tp_rs")
    assert names[scatter - 1] == "L0.attn.tp_rs.cat" and ops[scatter - 2].op_class == OpClass.GEMM


@pytest.mark.parametrize(("fields", "count"), [
    ({"activation_layout": "bsh-view", "microbatch_size": 1}, 4),  # the gathers are views: only the scatters copy
    ({"activation_layout": "bsh-view", "microbatch_size": 2, "global_batch": 8}, 8),
    ({"activation_layout": "sbh"}, 0),  # Megatron's [seq, batch, hidden]: dim 0, in place
    ({"activation_layout": "bsh", "tp_comm_overlap": True}, 0),  # async TP's fused collective-matmuls
    ({"activation_layout": "bsh", "sequence_parallel": False}, 0),  # all-reduces: no dimension to gather
])
def test_no_copy_where_the_collective_needs_none(fields: dict[str, object], count: int) -> None:
    copies, _ = _copies(_plan(**fields))
    assert len(copies) == count
    if fields.get("activation_layout") == "bsh-view" and count == 4:
        assert all(".sp_rs." in name or ".tp_rs." in name for name, _, _ in copies)


def test_torchtitan_runs_batch_first_and_megatron_sequence_first() -> None:
    assert get_framework("torchtitan").plan_fields()["activation_layout"] == "bsh"  # its runs: PyTorch of 2024-25
    assert get_framework("fsdp2").plan_fields()["activation_layout"] == "bsh-view"  # today's PyTorch
    assert ParallelPlan().activation_layout == "sbh"
