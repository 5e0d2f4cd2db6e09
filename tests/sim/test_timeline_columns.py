"""A simulated Timeline holds numpy columns and builds its pandas frame only when read: the
metrics and memory curves read from the columns equal those read from the frame, and equal the
pandas formulation they replaced, bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.job import DEFAULT_JOB, resolve_job
from sim.metrics import step_metrics
from sim.simulate import SimulationResult, simulate
from sim.timeline import Timeline


@pytest.fixture(scope="module")
def offloaded() -> SimulationResult:  # activation offload: memcpy spans, zero-bubble W spans
    return simulate(resolve_job({"schedule": "zb-h1", "offload_activations": True}, defaults=DEFAULT_JOB))


def _framed(tl: Timeline) -> Timeline:
    """The same spans as a frame-backed Timeline."""
    return Timeline(tl.spans.copy(), tl.meta)


def test_a_simulated_timeline_builds_its_frame_only_when_read(offloaded: SimulationResult) -> None:
    tl = Timeline(meta=offloaded.timeline.meta, columns=offloaded.timeline._columns)
    assert tl._frame is None
    lanes, starts = tl.labels("lane"), tl.column("start_s")
    assert tl._frame is None and len(tl) == starts.size > 0
    frame = tl.spans
    assert list(frame["lane"].astype(str)) == [lanes.categories[c] for c in lanes.codes]
    assert np.array_equal(frame["start_s"].to_numpy(), starts) and tl.labels("kind").categories == [
        str(c) for c in frame["kind"].cat.categories]


def test_metrics_from_columns_equal_metrics_from_the_frame(offloaded: SimulationResult) -> None:
    tl = offloaded.timeline
    assert step_metrics(_framed(tl)) == step_metrics(tl)


def test_step_metrics_equal_pandas_grouped_figures(offloaded: SimulationResult) -> None:
    m = offloaded.metrics
    table = m.per_rank
    assert len(table) > 1 and table["pp"].nunique() > 1
    assert m.step_time_s == float(table.groupby("step")["step_time_s"].max().mean())
    assert m.bubble_fraction == float((table["idle_s"] / table["step_time_s"]).groupby(table["pp"]).mean().mean())
    assert m.exposed_comm_fraction == float((table["exposed_comm_s"] / table["step_time_s"]).mean())
    assert m.comm_overlap_fraction == float(table["overlap_s"].sum() / table["comm_s"].sum())


def test_memory_from_columns_equals_memory_from_the_frame(offloaded: SimulationResult) -> None:
    tl, mm = offloaded.timeline, offloaded.memory_model
    framed = _framed(tl)
    for rank, curve in mm.activation_curves(framed).items():
        assert np.array_equal(curve.bytes, offloaded.curves[rank].bytes)
    assert mm.offloaded_activation_peak(framed) == offloaded.host_activation_peak


def test_host_activation_peak_equals_the_grouped_event_sum(offloaded: SimulationResult) -> None:
    mm, tl = offloaded.memory_model, offloaded.timeline
    sizes = {st.index: mm.stage_activation_bytes(st) for st in mm.stages}
    rank, t, d = mm._offload_events(tl, sizes)
    assert rank.size > 0 and not mm.layers_on_host
    ev = pd.DataFrame({"rank": rank, "t": t, "d": -d}).groupby(["rank", "t"], sort=True)["d"].sum().reset_index()
    expected = {int(r): float(np.cumsum(part["d"].to_numpy(float)).max(initial=0.0)) for r, part in ev.groupby("rank")}
    assert offloaded.host_activation_peak == expected and max(expected.values()) > 0
