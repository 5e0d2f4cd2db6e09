"""A decoder-only transformer built from a :class:`schedules.model.ModelSpec` (nanoGPT-style).

Pre-norm blocks (RMSNorm or LayerNorm), causal attention with grouped-query heads (RoPE or
learned positions), SwiGLU or GELU MLP, tied or untied embeddings. One :class:`Transformer`
can hold any contiguous slice of the model (a pipeline stage): the embedding only on the first
stage, the final norm and output projection only on the last, layers keyed by their global index
(as torchtitan's manual pipeline split does).

Weights are initialised per part from ``(seed, part index)``, so a stage built alone holds
exactly the weights the same part has in the full model: the pipeline split needs no copy of
the whole model, and a single-process reference run starts from identical weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from profiler.annotations import layer_name
from profiler.trainer.moe import MoE, init_moe
from schedules.model import ModelSpec
from schedules.moe import is_moe_layer, moe_of

INIT_STD = 0.02  # nanoGPT / GPT-2 initialisation


def make_norm(spec: ModelSpec) -> nn.Module:
    """The spec's normalisation layer over the hidden size."""
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.hidden_size, eps=1e-5)
    return nn.LayerNorm(spec.hidden_size, eps=1e-5)


def rope_tables(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables (seq_len x head_dim/2) of rotary embeddings (Su et al. 2021)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, seq, heads, head_dim) by the tables (rotate-half form, as GPT-NeoX)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads; under TP each rank holds a head slice."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, kv = spec.hidden_size, spec.kv_size
        self.head_dim, self.causal = spec.head_dim, spec.causal
        self.wq = nn.Linear(h, h, bias=spec.bias)
        self.wk = nn.Linear(h, kv, bias=spec.bias)
        self.wv = nn.Linear(h, kv, bias=spec.bias)
        self.wo = nn.Linear(h, h, bias=spec.bias)
        self.rope = spec.position_embedding == "rope"
        if self.rope:
            cos, sin = rope_tables(spec.seq_len, spec.head_dim)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)  # -1: the heads local to this TP rank
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        if self.rope:
            q = apply_rope(q, self.rope_cos[:s], self.rope_sin[:s])
            k = apply_rope(k, self.rope_cos[:s], self.rope_sin[:s])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """SwiGLU (w2(silu(w1 x) * w3 x)) or GELU (w2(gelu(w1 x))) feed-forward."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, f = spec.hidden_size, spec.ffn
        self.swiglu = spec.ffn_kind == "swiglu"
        self.w1 = nn.Linear(h, f, bias=spec.bias)
        self.w2 = nn.Linear(f, h, bias=spec.bias)
        self.w3 = nn.Linear(h, f, bias=spec.bias) if self.swiglu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer block; its forward is a ``trainsim:layer N`` profiler range."""

    def __init__(self, spec: ModelSpec, layer_id: int, recompute: bool = False) -> None:
        super().__init__()
        self.layer_id, self.recompute = layer_id, recompute
        self.attention_norm = make_norm(spec)
        self.attention = Attention(spec)
        self.ffn_norm = make_norm(spec)
        self.mlp: MLP | MoE = MoE(spec, moe_of(spec)) if is_moe_layer(spec, layer_id) else MLP(spec)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.ffn_norm(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function(layer_name(self.layer_id)):
            if self.recompute:
                return checkpoint(self._forward, x, use_reentrant=False)
            return self._forward(x)


class Embedding(nn.Module):
    """Token embedding plus learned positions (a second table indexed by position), if any."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.tok = nn.Embedding(spec.vocab_size, spec.hidden_size)
        learned = spec.position_embedding == "learned"
        self.pos = nn.Embedding(spec.seq_len, spec.hidden_size) if learned else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
            x = x + self.pos(positions)
        return x


class Transformer(nn.Module):
    """The layers ``layer_ids`` of the model, plus the embedding (``first``) and head (``last``).

    ``forward`` maps token ids (first stage) or hidden states to hidden states or, on the last
    stage, logits of shape (batch, seq, vocab).
    """

    def __init__(self, spec: ModelSpec, layer_ids: Sequence[int], *, first: bool, last: bool,
                 recompute: bool = False) -> None:
        super().__init__()
        self.embed = Embedding(spec) if first else None
        self.layers = nn.ModuleDict({str(i): Block(spec, i, recompute) for i in layer_ids})
        self.norm = make_norm(spec) if last else None
        self.output = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False) if last else None
        self.tied_embeddings = spec.tied_embeddings and last
        if self.tied_embeddings and self.output is not None:
            if self.embed is None:
                raise ValueError("tied embeddings need the embedding and the head in one stage")
            self.output.weight = self.embed.tok.weight

    def blocks(self) -> list[Block]:
        """The transformer blocks of this stage, in order."""
        return [block for block in self.layers.values() if isinstance(block, Block)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.norm is not None and self.output is not None:
            x = self.output(self.norm(x))
        return x


def build_model(spec: ModelSpec, *, seed: int, layers: Sequence[int] | None = None,
                first: bool = True, last: bool = True, recompute: bool = False) -> Transformer:
    """Build (a stage of) the model on CPU with deterministic per-part weights.

    ``layers`` defaults to all layers; ``first``/``last`` add the embedding and the head.
    """
    layer_ids = list(range(spec.num_layers)) if layers is None else list(layers)
    model = Transformer(spec, layer_ids, first=first, last=last, recompute=recompute)
    if model.embed is not None:
        init_part(model.embed, seed=seed, part=0, spec=spec)
    for block in model.blocks():
        init_part(block, seed=seed, part=1 + block.layer_id, spec=spec)
        if isinstance(block.mlp, MoE):
            init_moe(block.mlp, seed=seed, layer=block.layer_id, std=INIT_STD, num_layers=spec.num_layers)
    if model.norm is not None and model.output is not None:
        head = nn.ModuleList([model.norm] if spec.tied_embeddings else [model.norm, model.output])
        init_part(head, seed=seed, part=1 + spec.num_layers, spec=spec)
    return model


@torch.no_grad()
def init_part(module: nn.Module, *, seed: int, part: int, spec: ModelSpec) -> None:
    """Initialise ``module`` from its own generator (nanoGPT: N(0, 0.02), residual outputs
    scaled by 1/sqrt(2 * num_layers), zero biases, unit norm weights)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + part)
    residual_std = INIT_STD / math.sqrt(2 * spec.num_layers)
    for name, sub in module.named_modules():
        if isinstance(sub, (nn.LayerNorm, nn.RMSNorm)):
            sub.reset_parameters()
        elif isinstance(sub, (nn.Linear, nn.Embedding)):
            std = residual_std if name.endswith(("wo", "w2")) else INIT_STD
            sub.weight.copy_(torch.normal(0.0, std, sub.weight.shape, generator=gen))
            bias = getattr(sub, "bias", None)
            if isinstance(bias, torch.Tensor):
                bias.zero_()
