"""When a list-engine pass runs on the compiled kernel instead of the reference pass, and its input.

Both give the same start and end of every task, bit for bit (:mod:`sim.list_kernel` replays the
reference pass of :mod:`sim.list_engine` step for step, whose
:class:`sim.list_engine.GraphPasses` asks :func:`use_kernel`; ``tests/sim/test_list_kernel.py``
compares them). The kernel needs numba (``pip install trainsim[fast]``); without it, or with
``TRAINSIM_KERNEL=0``, every pass is the reference one. Loading numba and the kernel's cached
machine code costs ~0.35 s once per process (its first compilation after an install, ~10-25 s,
is cached on disk), while the reference pass runs ~6 µs per task and the kernel ~0.3-0.5 µs: a process
loads the kernel once its reference passes, counted with the one about to run, reach
:data:`KERNEL_MIN_TASKS` tasks in all (what loading costs: the rule of renting until the rent has
paid the price, never more than twice the cheaper choice in hindsight: one large graph loads it at
once, a command that simulates one small job never does, a caller simulating many small jobs in one
process does after ~0.35 s of reference passes), or when a caller expects many passes
(:func:`prefer_kernel`), then runs every later pass on it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import TYPE_CHECKING

import numpy as np

from core.taskgraph import TaskGraph

if TYPE_CHECKING:
    from sim.list_program import Program

KERNEL_MIN_TASKS = 60_000  # ~0.35 s of reference pass: loading the kernel costs as much
_state: dict[str, int] = {"loaded": False, "reference_tasks": 0}  # flags as 0/1, a count of task visits
log = logging.getLogger(__name__)


def numba_available() -> bool:
    """Can the compiled kernel run here (numba importable, not turned off by ``TRAINSIM_KERNEL=0``)?"""
    if os.environ.get("TRAINSIM_KERNEL", "auto") == "0":
        return False
    if "numba" not in _state:
        _state["numba"] = importlib.util.find_spec("numba") is not None
    return bool(_state["numba"])


def prefer_kernel() -> bool:
    """Load the kernel now if it can run (a caller about to run many passes); is it loaded?"""
    if not _state["loaded"] and numba_available():
        try:
            import sim.list_kernel  # noqa: F401  (numba and the cached machine code)
        except Exception as exc:  # noqa: BLE001  (a numba that cannot load or cache: the reference pass runs)
            log.warning("the compiled list kernel is unavailable (%s); using the reference pass", exc)
            _state["numba"] = False
            return False
        _state["loaded"] = True
    return bool(_state["loaded"])


def use_kernel(tasks: int) -> bool:
    """Does a pass over ``tasks`` tasks run on the kernel (loading it if it is worth it)?"""
    if not numba_available():
        return False
    if not _state["loaded"] and os.environ.get("TRAINSIM_KERNEL") != "1":
        _state["reference_tasks"] += tasks
        if _state["reference_tasks"] < KERNEL_MIN_TASKS:
            return False  # the reference pass runs this one
    return prefer_kernel()


def kernel_times(program: Program, durations: np.ndarray | list[float], crosses: np.ndarray | list[bool],
                 gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds) of every task on the kernel (end NaN: never ran, a deadlock)."""
    from sim.list_kernel import run_compiled

    return run_compiled(program, np.asarray(durations, np.float64), np.asarray(crosses, np.bool_), gpus_per_node)


def program_of(graph: TaskGraph) -> Program:
    """The kernel's pass structure of ``graph`` (:func:`sim.list_program.compile_program` on its
    columns)."""
    from sim.list_program import compile_program

    return compile_program(graph.columns)

