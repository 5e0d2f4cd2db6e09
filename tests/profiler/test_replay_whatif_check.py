"""What-if against reality: replaying a committed normal run with the slowdown that was injected
into its committed twin predicts the twin's measured step time (numbers in docs/commands/replay.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.analysis import analyze_run
from profiler.replay import WhatIf, parse_link, replay_run

RUNS = Path(__file__).resolve().parents[2] / "traces" / "whatif"
TOLERANCE = 0.15  # the machine is shared; docs/commands/replay.md gives the spread over repetitions


@pytest.mark.parametrize(("normal", "slowed", "whatif"), [
    ("pp2-1f1b", "pp2-1f1b-slow-rank1x3", WhatIf(scale=(("rank1", 3.0),))),
    ("dp2-zero3", "dp2-zero3-slow-comm-50ms", WhatIf(link=(parse_link("dp:latency=+0.05"),))),
])
@pytest.mark.slow
def test_replayed_slowdown_predicts_the_slowed_run(normal: str, slowed: str, whatif: WhatIf) -> None:
    result = replay_run(RUNS / normal, whatif)
    metrics = result.metrics()
    assert metrics["replayed"].step_time_s == pytest.approx(metrics["measured"].step_time_s, rel=1e-9)
    measured = analyze_run(RUNS / slowed).metrics.step_time_s
    predicted = metrics["whatif"].step_time_s
    assert predicted > 1.5 * metrics["measured"].step_time_s  # the slowdown is the signal, not noise
    assert abs(predicted / measured - 1.0) < TOLERANCE
