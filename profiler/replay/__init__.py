"""Trace replay: rebuild a measured run as a task graph, replay it on the simulator's engine,
and ask what-if questions (faster compute, a slow rank, faster links, dropped work).

Entry points: :func:`replay_run` (path -> :class:`ReplayResult`), :class:`WhatIf` and the knob
parsers, :func:`critical_path`. See docs/commands/replay.md.
"""

from __future__ import annotations

from profiler.replay.api import ReplayResult, replay_parsed, replay_run
from profiler.replay.build import MatchingError, build_replay_model
from profiler.replay.critical_path import CriticalPath, critical_path
from profiler.replay.knobs import LinkKnob, WhatIf, parse_link, parse_scale
from profiler.replay.simulate import ReplayDeadlock, run_replay

__all__ = ["CriticalPath", "LinkKnob", "MatchingError", "ReplayDeadlock", "ReplayResult", "WhatIf",
           "build_replay_model", "critical_path", "parse_link", "parse_scale", "replay_parsed",
           "replay_run", "run_replay"]
