"""Parsing ranks in worker processes gives the same run as parsing them in this process."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_kineto_cpu import gloo_rank

from profiler.kineto import load_run


def test_workers_give_identical_results(tmp_path: Path) -> None:
    for r in range(3):
        b = gloo_rank(r)
        b.world_size = 3
        b.write(tmp_path / f"rank{r}.json")
    serial = load_run(tmp_path, workers=1)
    parallel = load_run(tmp_path, workers=2)
    pd.testing.assert_frame_equal(serial.timeline.spans, parallel.timeline.spans)
    pd.testing.assert_frame_equal(serial.raw, parallel.raw)
    pd.testing.assert_frame_equal(serial.steps, parallel.steps)
    assert serial.timeline.meta == parallel.timeline.meta


def test_worker_errors_reach_the_caller(tmp_path: Path) -> None:
    gloo_rank(0).write(tmp_path / "rank0.json")
    (tmp_path / "rank1.json").write_bytes(b'{"traceEvents": [{"ph": "X"')
    with pytest.raises(ValueError, match="rank1.json: not a valid Kineto trace"):
        load_run(tmp_path, workers=2)
