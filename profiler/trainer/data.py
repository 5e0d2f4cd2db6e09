"""Deterministic synthetic training data: a seeded token stream, nothing downloaded.

Each sequence follows a noisy affine recurrence over the vocabulary (next = (a * token + c) mod V
with probability 0.75, else a uniformly random token), so a model can learn it and the loss
falls over the first steps. The global batch of step ``k`` depends only on ``(seed, k)``; a data
parallel rank takes its contiguous slice of rows.
"""

from __future__ import annotations

import torch

MULTIPLIER, INCREMENT, KEEP_PROBABILITY = 5, 3, 0.75


def global_batch(*, seed: int, step: int, batch: int, seq_len: int,
                 vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of shape (batch, seq_len) for ``step``: targets are inputs shifted by one."""
    gen = torch.Generator().manual_seed(seed * 7919 + step + 1)
    stream = torch.empty(batch, seq_len + 1, dtype=torch.long)
    stream[:, 0] = torch.randint(vocab_size, (batch,), generator=gen)
    noise = torch.randint(vocab_size, (batch, seq_len), generator=gen)
    keep = torch.rand(batch, seq_len, generator=gen) < KEEP_PROBABILITY
    for t in range(seq_len):
        follow = (stream[:, t] * MULTIPLIER + INCREMENT) % vocab_size
        stream[:, t + 1] = torch.where(keep[:, t], follow, noise[:, t])
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


def rank_batch(*, seed: int, step: int, batch: int, seq_len: int, vocab_size: int,
               dp_rank: int, dp: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of the global batch that data-parallel rank ``dp_rank`` of ``dp`` trains on."""
    inputs, targets = global_batch(seed=seed, step=step, batch=batch, seq_len=seq_len,
                                   vocab_size=vocab_size)
    rows = batch // dp
    part = slice(dp_rank * rows, (dp_rank + 1) * rows)
    return inputs[part], targets[part]
