"""What an engine run returns (both engines; apart so the list engine does not import SimPy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.timeline import Timeline


@dataclass(frozen=True)
class EngineResult:
    """Start/end time of every task (seconds) and the Timeline built from them."""

    start_s: np.ndarray
    end_s: np.ndarray
    timeline: Timeline
