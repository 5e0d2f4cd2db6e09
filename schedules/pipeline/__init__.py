"""Pipeline schedules as pure functions: (pp, micro-batches, chunks) -> per-rank action orders.

``build_schedule("1f1b", pp=4, microbatches=8)`` returns a :class:`schedules.actions.PipelineSchedule`.
One module per schedule, each with one ``build_*`` entry point (torch counterpart in brackets):

- ``gpipe``: :func:`gpipe.build_gpipe` [ScheduleGPipe]
- ``1f1b``: :func:`one_f_one_b.build_1f1b` [Schedule1F1B]
- ``interleaved``: :func:`interleaved.build_interleaved` [ScheduleInterleaved1F1B]
- ``interleaved-megatron``: ``build_interleaved(variant="megatron")`` [none: Megatron-LM's m == p rule]
- ``zb-h1``: :func:`zb_h1.build_zb_h1` [ScheduleInterleavedZeroBubble with one stage per rank]
- ``interleaved-zb``: :func:`interleaved_zb.build_interleaved_zb` [ScheduleInterleavedZeroBubble]
- ``zbv``: :func:`zbv.build_zbv` [ScheduleZBVZeroBubble]
- ``dualpipev``: :func:`dualpipev.build_dualpipev` [ScheduleDualPipeV]

Test oracles: :func:`execute_unit_costs` (idealized executor, deadlock check),
:func:`peak_inflight` (activations held per rank), :func:`check_schedule` (completeness).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from core.errors import unknown_name
from schedules.actions import PipelineSchedule
from schedules.pipeline._common import interleave_group
from schedules.pipeline.check import check_schedule
from schedules.pipeline.executor import Execution, execute_unit_costs
from schedules.pipeline.inflight import peak_inflight

Builder = Callable[[int, int, int], PipelineSchedule]

# name -> (module of schedules.pipeline, its build function, keyword arguments); a module is
# imported when its schedule is first built (a run builds one schedule; each module is ~0.2 ms)
_BUILDERS: MappingProxyType[str, tuple[str, str, dict[str, Any]]] = MappingProxyType({
    "gpipe": ("gpipe", "build_gpipe", {}),
    "1f1b": ("one_f_one_b", "build_1f1b", {}),
    "interleaved": ("interleaved", "build_interleaved", {}),
    "interleaved-megatron": ("interleaved", "build_interleaved", {"variant": "megatron"}),
    "zb-h1": ("zb_h1", "build_zb_h1", {}),
    "interleaved-zb": ("interleaved_zb", "build_interleaved_zb", {}),
    "zbv": ("zbv", "build_zbv", {}),
    "dualpipev": ("dualpipev", "build_dualpipev", {}),
})

__all__ = ["Execution", "build_schedule", "check_schedule", "execute_unit_costs",
           "interleave_group", "peak_inflight", "schedule_names"]


def schedule_names() -> tuple[str, ...]:
    """Names accepted by :func:`build_schedule`, in registry order."""
    return tuple(_BUILDERS)


def build_schedule(name: str, pp: int, microbatches: int, vpp: int = 1) -> PipelineSchedule:
    """Build the named schedule for ``pp`` ranks, ``microbatches`` micro-batches, ``vpp`` chunks.

    Raises ``ValueError`` (one line: field, value, what is valid) for an unknown name or a
    (pp, microbatches, vpp) combination the schedule cannot run.
    """
    if name not in _BUILDERS:
        raise unknown_name("pipeline schedule", name, _BUILDERS)
    module, function, kwargs = _BUILDERS[name]
    build = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    schedule: PipelineSchedule = build(pp, microbatches, vpp, **kwargs)
    return schedule
