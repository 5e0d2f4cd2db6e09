"""What one simulation produced: its figures, and its Timeline, written when first read."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from core.timeline_meta import TimelineMeta
from schedules.actions import PipelineSchedule
from sim.job import Job
from sim.memory import MemoryBreakdown, MemoryCurve, MemoryModel
from sim.memory_timeline import MemoryPeak, MemoryTimeline, memory_timelines
from sim.metrics import StepMetrics
from sim.steady_state import Extension
from sim.timeline import Timeline
from sim.window_step import WindowFigures


@dataclass(frozen=True)
class SimulationResult:
    """What one simulation produced. The Timeline (and the memory curves read from it) is made
    the first time it is read when the figures came from the step's window (``window``,
    :mod:`sim.window_step`)."""

    job: Job
    schedule: PipelineSchedule
    metrics: StepMetrics
    memory: dict[int, MemoryBreakdown]  # per simulated rank
    wall_s: float
    memory_model: MemoryModel  # the run's memory model (states, activations, host bytes)
    make_timeline: Callable[[], Timeline] = field(repr=False, compare=False)
    host_activation_peak: dict[int, float] = field(default_factory=dict)  # activation offload, bytes on host
    steady_state: Extension | None = None  # how a shorter simulated step was extended (None: simulated whole)
    steady_fallback: str = ""  # why every micro-batch was simulated ("": a shorter step was extended)
    window: WindowFigures | None = None  # figures made without the Timeline (None: read from it)

    @cached_property
    def timeline(self) -> Timeline:
        """The simulated step's spans."""
        return self.make_timeline()

    @cached_property
    def curves(self) -> dict[int, MemoryCurve]:
        """Activation bytes over time per simulated rank."""
        return self.memory_model.activation_curves(self.timeline)

    @cached_property
    def memory_timelines(self) -> dict[int, MemoryTimeline]:
        """HBM by category over time per simulated rank."""
        return memory_timelines(self.memory_model, self.timeline, self.curves)

    @cached_property
    def memory_peaks(self) -> dict[int, MemoryPeak]:
        """Each simulated rank's HBM peak (bytes, when, by category)."""
        if self.window is not None:
            return self.window.memory_peaks
        return {r: mt.peak() for r, mt in self.memory_timelines.items()}

    @property
    def meta(self) -> TimelineMeta:
        """The Timeline's meta (without writing it)."""
        return self.window.meta if self.window is not None else self.timeline.meta

    @property
    def simulated_ranks(self) -> list[int]:
        """Ranks the Timeline holds, sorted (without writing it)."""
        return self.window.ranks if self.window is not None else self.timeline.ranks

    @property
    def span_count(self) -> int:
        """Spans the Timeline holds (without writing it)."""
        return self.window.spans if self.window is not None else len(self.timeline)

    @property
    def peak_rank(self) -> int:
        """The simulated rank with the highest peak memory."""
        return max(self.memory, key=lambda r: (self.memory[r].total, -r))

    def keeping(self, **made: object) -> SimulationResult:
        """This result with some of its lazily made values (``timeline``, ``curves``,
        ``memory_timelines``, ``memory_peaks``) already made: they are kept, not made again."""
        self.__dict__.update(made)
        return self

    def with_timeline(self, timeline: Timeline) -> SimulationResult:
        """The same result holding ``timeline`` (the same spans with other meta: a comparison's
        step windows); its memory curves stay those already made."""
        kept = {k: v for k, v in self.__dict__.items() if k in MADE_ON_READ and k != "timeline"}
        return dataclasses.replace(self, make_timeline=lambda: timeline).keeping(**kept, timeline=timeline)


MADE_ON_READ = ("timeline", "curves", "memory_timelines", "memory_peaks")
"""The values a :class:`SimulationResult` makes the first time they are read."""
