"""The per-op SAC stored set measured in PyTorch itself, against schedules.memory's closed form.

A Llama-shaped block (RMSNorm, q/k/v apart with grouped K/V heads, RoPE, causal SDPA, SwiGLU in
``w2(silu(w1(x)) * w3(x))`` order) runs under ``torch.utils.checkpoint`` with the policy torchtitan
gives it (parallelize_llama.py @ 9dec370 ``_custom_policy``: MUST_SAVE for the ops of
``_save_list`` except every second aten.mm, PREFER_RECOMPUTE otherwise). On CPU, SDPA runs
``_scaled_dot_product_flash_attention_for_cpu``, which stands here for the CUDA flash kernel of
the list. After the forward, the tensors still alive beyond the parameters, the input and the
output are what the checkpoint keeps for the backward: they must sum to the closed form's bytes.
"""

from __future__ import annotations

import gc
from collections import defaultdict

import pytest

from schedules.memory import ActivationConfig, alternate_matmul_stored_bytes
from schedules.model import ModelSpec

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

B, S, H, HEADS, KV_HEADS, FFN = 2, 128, 256, 8, 2, 512
HD = H // HEADS


class _Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


def _rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = _Norm(), _Norm()
        self.wq = nn.Linear(H, H, bias=False)
        self.wk = nn.Linear(H, KV_HEADS * HD, bias=False)
        self.wv = nn.Linear(H, KV_HEADS * HD, bias=False)
        self.wo = nn.Linear(H, H, bias=False)
        self.w1, self.w3 = nn.Linear(H, FFN, bias=False), nn.Linear(H, FFN, bias=False)
        self.w2 = nn.Linear(FFN, H, bias=False)

    def forward(self, x, cos, sin):
        a = self.attention_norm(x)
        q = _rope(self.wq(a).view(B, S, HEADS, HD), cos, sin)
        k = _rope(self.wk(a).view(B, S, KV_HEADS, HD), cos, sin).repeat_interleave(HEADS // KV_HEADS, dim=2)
        v = self.wv(a).view(B, S, KV_HEADS, HD).repeat_interleave(HEADS // KV_HEADS, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(o.transpose(1, 2).reshape(B, S, H))
        m = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(m)) * self.w3(m))


def _torchtitan_policy_context():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_efficient_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[mode] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _live_storage_bytes() -> dict[int, int]:
    """Bytes of every storage a live plain tensor (not a Parameter) points at, by address."""
    out = {}
    for obj in gc.get_objects():
        if type(obj) is torch.Tensor:
            storage = obj.untyped_storage()
            out[storage.data_ptr()] = storage.nbytes()
    return out


@pytest.mark.slow
def test_checkpointed_block_keeps_what_the_closed_form_counts():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = _Block().to(torch.bfloat16)
    cos = torch.randn(S, 1, HD // 2, dtype=torch.bfloat16)
    sin = torch.randn(S, 1, HD // 2, dtype=torch.bfloat16)
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    gc.collect()
    before = _live_storage_bytes()
    y = checkpoint(block, x, cos, sin, use_reentrant=False, context_fn=_torchtitan_policy_context,
                   preserve_rng_state=False)
    gc.collect()
    kept = {ptr: n for ptr, n in _live_storage_bytes().items()
            if ptr not in before and ptr != y.untyped_storage().data_ptr()}
    model = ModelSpec(num_layers=1, hidden_size=H, num_heads=HEADS, num_kv_heads=KV_HEADS, ffn_hidden_size=FFN,
                      ffn_kind="swiglu", vocab_size=1000, seq_len=S, norm="rmsnorm", position_embedding="rope",
                      bias=False, dropout=False)
    cfg = ActivationConfig(recompute="selective", selective="alternate-matmul", framework="torch", flash_attention=True)
    block_input = 2 * B * S * H  # the checkpoint keeps x, which the test holds too (in `before`)
    assert sum(kept.values()) == alternate_matmul_stored_bytes(model, B, cfg) - block_input
    y.float().sum().backward()  # the kept set is enough for the backward
    assert all(p.grad is not None for p in block.parameters())
