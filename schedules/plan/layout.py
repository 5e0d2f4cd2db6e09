"""The plan's layout: how the model and the batch are split over the GPUs and the pipeline's steps.

Attributes of :class:`Layout`:
    tp, cp, pp, dp: tensor, context, pipeline and data parallel degrees.
    vpp: virtual pipeline chunks per pipeline rank (interleaved / V schedules).
    microbatch_size: sequences per micro-batch.
    global_batch: sequences per optimizer step (over all DP replicas).
    schedule: pipeline schedule name (:mod:`schedules.pipeline`).
    sequence_parallel: shard norm/dropout activations over TP (all-gather/reduce-scatter).
    uneven_stages: allow num_layers not divisible by pp*vpp (first and last stages get fewer).
    placement: parallel dimensions from innermost (consecutive devices) to outermost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import invalid
from core.settings import BOOLEAN, Rule, check_declared, choice, integer, setting

SINGLE_CHUNK_SCHEDULES = ("gpipe", "1f1b", "zb-h1")
INTERLEAVED_SCHEDULES = ("interleaved", "interleaved-megatron", "interleaved-zb")
TORCH_INTERLEAVED_SCHEDULES = ("interleaved", "interleaved-zb")  # torch's rounds of max(1, m // pp)
LOCKSTEP_SCHEDULES = ("interleaved", "interleaved-megatron")  # Megatron's blocking interleaved 1F1B runs in lock-step
V_SCHEDULES = ("zbv", "dualpipev")
SCHEDULE_NAMES = SINGLE_CHUNK_SCHEDULES + INTERLEAVED_SCHEDULES + V_SCHEDULES
DIMENSIONS = ("tp", "cp", "dp", "pp")
DEGREE = integer(1, 65536)


def _placement_ok(v: Any) -> bool:
    parts = v.split(",") if isinstance(v, str) else v
    return isinstance(parts, list | tuple) and all(isinstance(p, str) for p in parts) \
        and sorted(p.strip() for p in parts) == sorted(DIMENSIONS)


PLACEMENT = Rule("expected a permutation of tp,cp,dp,pp (innermost first)", _placement_ok)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """The parallel degrees, the batch and the pipeline schedule (see the module docstring)."""

    tp: int = setting(1, rule=DEGREE, help="tensor parallel")
    cp: int = setting(1, rule=DEGREE, help="context parallel")
    pp: int = setting(1, rule=DEGREE, help="pipeline parallel")
    dp: int = setting(1, rule=integer(1, 1 << 30), help="data parallel (default: the GPUs left)")
    # dp follows from the cluster's size when not given (up to 10^6 nodes x 1024 GPUs): whether
    # this machine can simulate it is the size guard's business (sim.size_guard), not a bound here
    vpp: int = setting(1, rule=integer(1, 1024), help="virtual stages per rank")
    microbatch_size: int = setting(1, rule=integer(1, 1_000_000), auto=True, metavar="N|auto",
                                   help="sequences per micro-batch (default 1; auto, and the default when "
                                        "--global-batch is given alone: the fastest of 1/2/4 that fits, "
                                        "sim/microbatch_tuning.py)")
    global_batch: int = setting(1, rule=integer(1, 1_000_000_000),
                                help="sequences per step (instead of --microbatches)")
    schedule: str = setting("1f1b", rule=choice(SCHEDULE_NAMES), help="pipeline schedule")
    sequence_parallel: bool = setting(False, rule=BOOLEAN, help="shard norm/dropout activations over TP")
    uneven_stages: bool = setting(False, rule=BOOLEAN, help="allow layers not divisible by pp*vpp")
    placement: tuple[str, ...] = setting(("tp", "cp", "dp", "pp"), rule=PLACEMENT,
                                         help="dimensions innermost first, e.g. tp,cp,dp,pp")

    def __post_init__(self) -> None:
        check_declared(self, invalid)

    @property
    def world_size(self) -> int:
        """GPUs used: tp * cp * pp * dp."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp * microbatch_size)."""
        return self.global_batch // (self.dp * self.microbatch_size)

    @property
    def num_chunks(self) -> int:
        """Model chunks per pipeline rank (1 unless interleaved/V)."""
        return self.vpp
