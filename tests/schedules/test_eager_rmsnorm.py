"""The eager RMSNorm's memory traffic (schedules/layer_ops.py eager_rmsnorm_passes) against the aten
ops torch itself runs for torchtitan's RMSNorm (models/norms.py: ``self._norm(x.float()).type_as(x)
* self.weight``) on bf16 activations, forward and backward, each op's full-size operands and
results counted (a broadcast [tokens, 1] statistic read as one read of the materialised tensor)."""

from __future__ import annotations

import pytest

from schedules.elementwise import ELEMENTWISE_PASSES, eager_rmsnorm_passes

torch = pytest.importorskip("torch")
TOKENS, HIDDEN = 64, 256


def _counted_bytes_per_element(run) -> float:  # type: ignore[no-untyped-def]
    """Bytes per [tokens, hidden] element that the aten ops under ``run`` read and write."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    size = TOKENS * HIDDEN

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            full = [t for t in tree_flatten((args, kwargs, out))[0]
                    if isinstance(t, torch.Tensor) and t.numel() >= size]
            if func._schema.name.split("::")[-1] not in ("view", "_unsafe_view", "expand", "detach"):
                Count.total += sum(t.element_size() * (t.numel() if t.stride()[-1] else 1) for t in full)
            return out

    with Count():
        run()
    return Count.total / size


def test_forward_and_backward_bytes_match_the_aten_ops() -> None:
    weight = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    out = {}

    def forward() -> None:
        xf = x.float()
        out["y"] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    forward_bytes = _counted_bytes_per_element(forward)
    grad = torch.randn_like(out["y"])
    backward_bytes = _counted_bytes_per_element(lambda: out["y"].backward(grad))
    fwd, bwd = eager_rmsnorm_passes(2)
    assert fwd * 2 == forward_bytes == 36.0
    assert bwd * 2 == pytest.approx(backward_bytes, abs=0.01) and bwd * 2 == 92.0  # + a few bytes of [tokens, 1] reads


def test_fp32_activations_keep_the_plain_count() -> None:
    """No casts when the activations are already fp32 (the CPU trainer)."""
    assert eager_rmsnorm_passes(4) == ELEMENTWISE_PASSES["eager"]["rmsnorm"]
