"""Explore cluster designs: sweep parallel plans over designs and GPU counts, prune what cannot
run or fit, time the rest fast, and rank by time and cost to train (``trainsim explore``).

Entry points:

- :class:`SweepSpec` / :class:`SearchSpace` (:mod:`sim.explore.spec`): what to sweep.
- :func:`run_sweep` (:mod:`sim.explore.sweep`): run or resume a sweep into a directory on a
  backend (:func:`sim.explore.backends.make_backend`: in-process, local processes, Dask, Ray);
  with ``keep``, only plans that can reach each design's ``keep`` best are timed
  (:mod:`sim.explore.bound_prune`, by the step-time lower bound of :mod:`sim.explore.bound`).
- :func:`evaluate_plan` (:mod:`sim.explore.fast_eval`): one plan's step time and breakdown with
  the simulator's graph rules and cost model, without SimPy.
- :func:`estimate_memory` (:mod:`sim.explore.memory_estimate`): a plan's peak memory before simulating.
- :func:`pareto_front`, :func:`best_per_design` (:mod:`sim.explore.rank`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.explore.fast_eval import FastStep, evaluate_plan
    from sim.explore.memory_estimate import MemoryEstimate, estimate_memory
    from sim.explore.rank import best_per_design, pareto_front
    from sim.explore.spec import SearchSpace, SweepSpec
    from sim.explore.sweep import SweepOutcome, run_sweep

__all__ = ["FastStep", "MemoryEstimate", "SearchSpace", "SweepOutcome", "SweepSpec", "best_per_design",
           "estimate_memory", "evaluate_plan", "pareto_front", "run_sweep"]
_HOME = {"FastStep": "fast_eval", "evaluate_plan": "fast_eval", "MemoryEstimate": "memory_estimate",
         "estimate_memory": "memory_estimate", "best_per_design": "rank", "pareto_front": "rank",
         "SearchSpace": "spec", "SweepSpec": "spec", "SweepOutcome": "sweep", "run_sweep": "sweep"}


def __getattr__(name: str) -> Any:
    """The entry points, imported when first used (a module that needs only :mod:`sim.explore.spec`,
    as ``simulate`` does, does not load the sweep)."""
    if name not in _HOME:
        raise AttributeError(f"module 'sim.explore' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sim.explore.{_HOME[name]}"), name)
