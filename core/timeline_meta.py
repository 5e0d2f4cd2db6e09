"""What a Timeline (and the TaskGraph it was simulated from) records beside its spans.

One typed record for the three sources of a Timeline: the simulator (the builder's graph facts,
the engine, the steady-state extension), the trace parser (the measured run's ranks, steps,
clock and warnings) and replay. A field a source does not know stays None (or empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

StepWindow = tuple[int, int, float, float]
"""(rank, step, start_s, end_s) of one rank's step."""


class Source(StrEnum):
    """Where a Timeline's spans come from."""

    SIMULATED = "simulated"
    MEASURED = "measured"
    REPLAYED = "replayed"


@dataclass(frozen=True, kw_only=True)
class SteadyState:
    """How a simulated step was extended from a shorter one (:mod:`sim.steady_state`)."""

    simulated_microbatches: int
    period_microbatches: int
    period_s: float
    copies: int
    window_start: int


@dataclass(frozen=True, kw_only=True)
class TimelineMeta:
    """The facts of a Timeline beyond its spans.

    Attributes:
        source: simulated, measured or replayed.
        world_size: GPUs (ranks) of the job, whether or not every one has spans.
        ranks: the ranks a measured run has traces of.
        rank_pp: each rank's pipeline stage.
        rank_coords: each simulated rank's (tp, cp, dp, pp) coordinates.
        step_windows: per rank and step, its window (``StepWindow``); None: the spans' extent.
        folded: a simulation of one rank per pipeline stage standing for its DP and TP peers.
        steps: simulated training steps.
        schedule: the pipeline schedule's name.
        num_microbatches: micro-batches per pipeline per step.
        model_flops_per_step: the model's FLOPs of one step (6·N·tokens and attention).
        tokens_per_step: tokens of one step.
        detail: span detail of a simulation: "op" or "task".
        engine: the engine that ran it ("simpy" or "list").
        ideal_network: communication was free.
        playground: a schedule-playground run of fixed durations.
        steady_state: how the step was extended from a shorter simulation, if it was.
        steps_kept, profiler_steps_kept, profiler_steps_dropped: the measured step labels kept,
            the profiler steps kept and those dropped (warm-up, incomplete).
        backend, device_kind: a measured run's process-group backends and device kinds ("," joined).
        devices, files: per rank (as a string) its device and its trace file.
        skipped_events, malformed_events: trace events skipped, malformed events by kind.
        t0_unix_us: the Timeline's time 0 on the Unix clock (microseconds).
        clock, step_time: how a measured run's clocks were aligned and its step time defined.
        warnings: what the parser or a later pass found questionable.
        gloo_groups: how a gloo run's process groups were found (its traces do not name them).
    """

    source: Source | None = None
    world_size: int | None = None
    ranks: tuple[int, ...] | None = None
    rank_pp: Mapping[int, int] = field(default_factory=dict)
    rank_coords: Mapping[int, tuple[int, int, int, int]] = field(default_factory=dict)
    step_windows: tuple[StepWindow, ...] | None = None
    folded: bool | None = None
    steps: int | None = None
    schedule: str | None = None
    num_microbatches: int | None = None
    model_flops_per_step: float | None = None
    tokens_per_step: float | None = None
    detail: str | None = None
    engine: str | None = None
    ideal_network: bool | None = None
    playground: bool = False
    steady_state: SteadyState | None = None
    steps_kept: tuple[int, ...] | None = None
    profiler_steps_kept: tuple[int, ...] | None = None
    profiler_steps_dropped: tuple[int, ...] | None = None
    backend: str | None = None
    device_kind: str | None = None
    devices: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    skipped_events: Mapping[str, int] = field(default_factory=dict)
    malformed_events: Mapping[str, int] | None = None
    t0_unix_us: float | None = None
    clock: str | None = None
    step_time: str | None = None
    warnings: tuple[str, ...] = ()
    gloo_groups: str | None = None
