"""A mixture-of-experts feed-forward block built from a :class:`schedules.moe.MoESpec`.

Router: a bias-free linear h -> E, softmax over the experts (in fp32), the ``top_k`` largest
probabilities renormalised to sum to one (Mixtral; Qwen3's ``norm_topk_prob``). Experts: SwiGLU
MLPs ``w2(silu(x w1) * (x w3))`` stored stacked, (E, h, f) and (E, f, h), so expert parallelism
keeps a slice of the first dimension. Shared experts (DeepSeekMoE) see every token. No token is
dropped (no capacity limit) and there is no auxiliary load-balancing loss, so the block computes
exactly sum_k p_k · expert_k(x) + shared(x), deterministically, on any number of EP ranks.

The token exchange between expert-parallel ranks is in :mod:`profiler.trainer.moe_dispatch`;
:mod:`profiler.trainer.moe_parallel` splits the experts over EP ranks and the block over TP.
Under tensor parallelism the block's parameters are replicated DTensors and it computes on the
rank's own sequence shard: :func:`local` hands the computation a parameter's local tensor whose
gradient is marked partial (summed over the TP ranks, as for sequence-parallel norms).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.tensor import DTensor, Partial

from profiler.trainer.moe_dispatch import route_tokens
from schedules.model import ModelSpec
from schedules.moe import MoESpec


def local(param: torch.Tensor) -> torch.Tensor:
    """A parameter as a plain tensor: a replicated DTensor's local copy, its gradient partial."""
    if isinstance(param, DTensor):
        return param.to_local(grad_placements=(Partial(),))
    return param


class ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


class Experts(nn.Module):
    """``num_experts`` SwiGLU MLPs of inner width ``ffn`` with stacked weights.

    ``first`` is the global index of expert 0 here (its weights are initialised from that index,
    so a rank holding experts 4..7 holds the same weights as the full model's experts 4..7).
    ``grad_scale`` multiplies the weights' gradients (expert parallelism sets 1/ep).
    """

    def __init__(self, num_experts: int, hidden: int, ffn: int, first: int = 0) -> None:
        super().__init__()
        self.first, self.grad_scale = first, 1.0
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden, ffn))
        self.w3 = nn.Parameter(torch.empty(num_experts, hidden, ffn))
        self.w2 = nn.Parameter(torch.empty(num_experts, ffn, hidden))

    @property
    def num_experts(self) -> int:
        """Experts held here."""
        return int(self.w1.shape[0])

    def forward(self, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """``tokens`` grouped by expert, ``counts[e]`` rows for expert e -> their outputs.

        Every expert runs, with zero rows if it got no token, so every weight gets a gradient.
        """
        w1, w3, w2 = (self._weight(w) for w in (self.w1, self.w3, self.w2))
        outputs = [self._mlp(chunk, w1[e], w3[e], w2[e])
                   for e, chunk in enumerate(tokens.split(counts))]
        return torch.cat(outputs)

    def _weight(self, param: torch.Tensor) -> torch.Tensor:
        weight = local(param)
        return weight if self.grad_scale == 1.0 else ScaleGrad.apply(weight, self.grad_scale)

    @staticmethod
    def _mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ w1) * (x @ w3)) @ w2

    @torch.no_grad()
    def init_weights(self, *, seed: int, layer: int, std: float, residual_std: float) -> None:
        """N(0, std) inputs, N(0, residual_std) outputs, one generator per (seed, layer, expert)."""
        for e in range(self.num_experts):
            gen = torch.Generator().manual_seed((seed * 1_000_003 + layer) * 65_537 + self.first + e)
            for weight, sd in ((self.w1, std), (self.w3, std), (self.w2, residual_std)):
                weight[e].copy_(torch.normal(0.0, sd, weight[e].shape, generator=gen))


class MoE(nn.Module):
    """Router, routed experts and shared experts of one layer (the block's ``mlp``)."""

    def __init__(self, spec: ModelSpec, moe: MoESpec) -> None:
        super().__init__()
        h = spec.hidden_size
        self.num_experts, self.top_k = moe.num_experts, moe.top_k
        self.router = nn.Linear(h, moe.num_experts, bias=False)
        self.experts = Experts(moe.num_experts, h, moe.expert_ffn_size)
        self.shared = (Experts(moe.num_shared_experts, h, moe.shared_ffn, first=moe.num_experts)
                       if moe.num_shared_experts else None)
        self.ep_group: ProcessGroup | None = None  # set by expert parallelism

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, device = x.shape, x.device.type
        tokens = x.reshape(-1, shape[-1])
        if torch.is_autocast_enabled(device):  # dispatch in the compute dtype (bf16), not fp32
            tokens = tokens.to(torch.get_autocast_dtype(device))
        probs = F.linear(tokens, local(self.router.weight)).float().softmax(dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
        out = route_tokens(tokens, chosen, weights, self.experts, num_experts=self.num_experts,
                           group=self.ep_group)
        if self.shared is not None:
            n = tokens.shape[0]
            shared = self.shared(tokens.repeat(self.shared.num_experts, 1), [n] * self.shared.num_experts)
            out = out + shared.view(-1, n, shape[-1]).sum(dim=0)
        return out.view(shape)


def init_moe(module: MoE, *, seed: int, layer: int, std: float, num_layers: int) -> None:
    """Initialise the experts of ``module`` (the router is an ``nn.Linear``, initialised with the
    block); output projections scaled by 1/sqrt(2 * num_layers) as the dense MLP's ``w2``."""
    residual_std = std / math.sqrt(2 * num_layers)
    for experts in (module.experts, module.shared):
        if experts is not None:
            experts.init_weights(seed=seed, layer=layer, std=std, residual_std=residual_std)
