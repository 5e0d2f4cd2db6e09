"""Fixed costs of small models and small micro-batches: the host issuing kernels one by one, and
the per-step synchronisations a framework adds.

Launch-bound execution. The host issues op i at (i + 1) h (h: host time per op: Python, the
framework's dispatch, the CUDA launch); the GPU runs the kernels in order, each starting when it
is issued and its predecessor has ended:

    end_i = max((i + 1) h, end_(i-1)) + k_i         =>  end_(n-1) = max_j ((j + 1) h + sum_(i>=j) k_i)

so a step costs max(n h + k_last, sum k) at the extremes: the GPU hides the host when its
kernels are longer than h, and idles otherwise. CUDA graphs replay the captured kernels with one
launch (h -> 0 per kernel, one graph launch per region); ``torch.compile`` fuses element-wise
chains (fewer kernels) and, in mode "reduce-overhead", also captures CUDA graphs.

Facts (per-op host time h), each with its source:
- EAGER_OP_HOST_S 7 us: "an overhead of ~7 microseconds for the simplest tensor operations"
  (y = 2 * x with autograd; 5 us without), pytorch/pytorch issue #41383; a maintainer (ngimel)
  there: ~2 us for x * x without autograd, about half of it Python, ~1 us from C++.
- MODULE_OP_HOST_S 45 us: eager PyTorch through nn.Modules: 1185 kernel launches took 53.7 ms of
  host time per frame while the GPU was busy 7.27 ms (A6000, PyTorch 2.6; CUDA graphs: 11.98 ms
  with 9 launches), facebookresearch/sam2 issue #768: 53.7 ms / 1185 = 45 us per kernel.
- Host-bound steps, measured: ResNet-50 training on a V100 (pytorch/benchmark PR #706): eager
  89.0, 92.9, 93.7 ms at batch 1, 2, 4 (flat: host-bound) against 50.2, 56.1, 71.5 ms with CUDA
  graphs; from batch 8 on eager equals the graph time (105.1 vs 105.4 ms): the max() above.
Step synchronisations Megatron-LM adds (megatron/core/distributed/finalize_model_grads.py):
``_allreduce_word_embedding_grads`` all-reduces the tied embedding's gradient (vocab / tp x h
elements) between the first and last pipeline stages when pp > 1; with sequence parallelism
``_allreduce_layernorm_grads`` all-reduces the norm weights' gradients over the TP group; the
gradient clip all-reduces one scalar (:mod:`schedules.optimizer_traffic`).
Units: seconds, elements, bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import invalid, require_nonnegative_int, require_number, require_positive_int

EAGER_OP_HOST_S = 7e-6
MODULE_OP_HOST_S = 53.7e-3 / 1185


def launch_bound_time_s(kernel_s: Sequence[float], host_s_per_op: float) -> float:
    """Seconds from the first issue to the last kernel's end for kernels of ``kernel_s`` seconds
    issued every ``host_s_per_op`` seconds (module docstring)."""
    require_number("host_s_per_op", host_s_per_op)
    k = np.asarray(kernel_s, dtype=float)
    if k.ndim != 1 or (k < 0).any() or not np.isfinite(k).all():
        raise invalid("kernel_s", kernel_s, "expected a sequence of numbers >= 0")
    if len(k) == 0:
        return 0.0
    tail = np.cumsum(k[::-1])[::-1]  # sum of k_i for i >= j
    issue = host_s_per_op * np.arange(1, len(k) + 1)
    return float((issue + tail).max())


def exposed_host_s(kernel_s: Sequence[float], host_s_per_op: float) -> float:
    """Seconds the host adds to the kernels' own sum (the GPU's idle time while it waits)."""
    return launch_bound_time_s(kernel_s, host_s_per_op) - float(np.sum(kernel_s))


@dataclass(frozen=True)
class StepCollective:
    """A collective a framework runs once per step, outside the layers' own communication."""

    name: str
    op: str
    elements: float
    group: str  # "pp_ends" (first and last stage), "tp", "dp", "model_parallel"


def megatron_step_collectives(*, pp: int, tp: int, vocab: int, hidden: int, tied_embeddings: bool,
                              sequence_parallel: bool, norm_params_per_stage: int) -> list[StepCollective]:
    """Megatron-LM's per-step extra collectives (finalize_model_grads and clip_grad_norm_fp32)."""
    for name, value in (("pp", pp), ("tp", tp), ("vocab", vocab), ("hidden", hidden)):
        require_positive_int(name, value)
    require_nonnegative_int("norm_params_per_stage", norm_params_per_stage)
    out = [StepCollective("grad_norm", "all_reduce", 1, "model_parallel")]
    if pp > 1 and tied_embeddings:
        out.append(StepCollective("embedding_grads", "all_reduce", vocab / tp * hidden, "pp_ends"))
    if tp > 1 and sequence_parallel and norm_params_per_stage:
        out.append(StepCollective("layernorm_grads", "all_reduce", norm_params_per_stage, "tp"))
    return out
