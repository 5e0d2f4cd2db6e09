"""The torch loss's memory passes (schedules/stage_ops.py loss_passes) against the aten ops torch runs
for ``F.cross_entropy(logits.float(), labels)`` (torchtitan's loss and the included trainer's),
forward and backward, on bf16 activations (fp32 ones keep an effective count checked against the
trainer's CPU traces, schedules/stage_ops.py); each op's full-size operands and results counted,
less what an op only gathers (nll_loss reads one logit per token) or only zero-fills."""

from __future__ import annotations

import pytest

from schedules.plan import ParallelPlan
from schedules.stage_ops import loss_passes

torch = pytest.importorskip("torch")
TOKENS, VOCAB = 64, 4096
GATHERS = {"nll_loss_forward": 1, "nll_loss_backward": 1}  # full-size inputs they index, not read
VIEWS = ("detach", "alias", "view", "_unsafe_view", "expand", "t", "reshape", "as_strided")  # no data moved


def _passes(dtype, run) -> float:  # type: ignore[no-untyped-def]
    """fp32 passes (bytes / 4 per logit) the aten ops under ``run`` move."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    size = TOKENS * VOCAB

    class Count(TorchDispatchMode):
        total = 0.0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            name = func._schema.name.split("::")[-1]
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.numel() >= size]
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel() >= size]
            if name in VIEWS:
                return out
            skipped = GATHERS.get(name, 0)
            Count.total += sum(t.element_size() * t.numel() for t in inputs[skipped:] + outputs)
            return out

    with Count():
        run()
    return Count.total / (4 * size)


@pytest.mark.parametrize(("dtype", "plan_dtype"), [(torch.bfloat16, "bf16")])
def test_forward_and_backward_passes_match_the_aten_ops(dtype, plan_dtype) -> None:  # type: ignore[no-untyped-def]
    logits = torch.randn(TOKENS, VOCAB, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, VOCAB, (TOKENS,))
    out = {}

    def forward() -> None:
        out["loss"] = torch.nn.functional.cross_entropy(logits.float(), labels)

    fwd = _passes(dtype, forward)
    bwd = _passes(dtype, lambda: out["loss"].backward())
    plan = ParallelPlan(framework="torch", dtype=plan_dtype, global_batch=1)
    assert loss_passes(plan) == (fwd, bwd)
