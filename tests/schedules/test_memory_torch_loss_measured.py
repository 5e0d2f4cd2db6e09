"""torch's fp32 cross-entropy in PyTorch itself, against schedules.memory's head accounting.

The loss torchtitan (train.py @ 9dec370 ``loss_fn``) and the included trainer
(``profiler/trainer/pipeline.py``) compute: ``F.cross_entropy(logits.flatten(0, 1).float(), labels)``
on bf16 logits. Recorded with saved-tensor hooks and a dispatch mode: the backward keeps one fp32
logit-sized tensor (log_softmax's output), and log_softmax's backward runs with three fp32
logit-sized tensors live (its saved output, nll_loss's input gradient, its own result):
the stored 4·s·b·V plus :func:`schedules.memory.head_working_bytes`' 2 x 4·s·b·V.
"""

from __future__ import annotations

import pytest

from schedules.memory import ActivationConfig, head_working_bytes
from schedules.model import ModelSpec

torch = pytest.importorskip("torch")

B, S, V = 2, 16, 1000


def _logits():
    torch.manual_seed(0)
    return torch.randn(B, S, V, dtype=torch.bfloat16, requires_grad=True), torch.randint(0, V, (B, S))


def test_backward_keeps_only_the_fp32_log_probabilities():
    logits, labels = _logits()
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = (t.dtype, tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    big = [v for v in saved.values() if len(v[1]) == 2 and v[1][1] == V]
    assert big == [(torch.float32, (B * S, V))]


def test_log_softmax_backward_holds_three_fp32_logit_tensors():
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            calls.append((func, [(t.dtype, tuple(t.shape)) for t in tensors], (out.dtype, tuple(out.shape))
                          if isinstance(out, torch.Tensor) else None))
            return out

    logits, labels = _logits()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    with Record():
        loss.backward()
    fp32 = (torch.float32, (B * S, V))
    nll = [c for c in calls if c[0] == torch.ops.aten.nll_loss_backward.default]
    lsm = [c for c in calls if c[0] == torch.ops.aten._log_softmax_backward_data.default]
    assert len(nll) == 1 and nll[0][2] == fp32
    assert len(lsm) == 1 and lsm[0][1][:2] == [fp32, fp32] and lsm[0][2] == fp32  # grad, saved output -> result
    model = ModelSpec(num_layers=1, hidden_size=64, num_heads=4, vocab_size=V, seq_len=S)
    assert head_working_bytes(model, B, ActivationConfig(framework="torch")) == 2 * 4 * B * S * V
