"""Defaults for the training run a sweep sizes, when the user gives none.

- Tokens: :data:`TOKENS_PER_PARAM` = 20 tokens per parameter, the compute-optimal ratio of
  Hoffmann et al., "Training Compute-Optimal Large Language Models" (Chinchilla, 2022,
  arXiv:2203.15556; Chinchilla itself is 70B parameters trained on 1.4T tokens), rounded to
  3 significant digits.
- Global batch (sequences): about :data:`BATCH_TOKENS` = 2**22 (4M) tokens per step, Llama 2's
  global batch (Touvron et al. 2023, arXiv:2307.09288, section 2.2) and the first stage of
  Llama 3 405B's (arXiv:2407.21783, section 3.4.1), divided by the sequence length and rounded to
  the nearest multiple of the largest divisor of every swept GPU count that does not exceed it, so
  that it splits evenly over the data-parallel sizes those GPU counts allow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from schedules.model import ModelSpec

TOKENS_PER_PARAM = 20
BATCH_TOKENS = 2**22


def default_tokens(model: ModelSpec) -> float:
    """Tokens to train ``model`` compute-optimally (20 per parameter, 3 significant digits)."""
    return float(f"{TOKENS_PER_PARAM * model.num_params():.3g}")


def default_global_batch(seq_len: int, gpu_counts: Iterable[int]) -> int:
    """Sequences per step: ~4M tokens / ``seq_len``, a multiple of a divisor of every GPU count."""
    target = max(1, round(BATCH_TOKENS / seq_len))
    common = math.gcd(*gpu_counts)
    step = max(d for d in range(1, min(common, target) + 1) if common % d == 0)
    return max(1, round(target / step)) * step


DEFAULT_NOTES = {"tokens": f"default: {TOKENS_PER_PARAM} per parameter, Chinchilla",
                 "global_batch": f"default: ~{BATCH_TOKENS / 2**20:.0f}M tokens per step"}
"""What each default is, as the outputs quote it."""
