"""Timeline and memory figures draw what a screen can show: zero-length spans left out, sub-pixel
communication merged (its busy share kept), curves thinned with their peaks exact."""

import numpy as np
import pytest

from core.timeline_meta import TimelineMeta
from sim.report.bars import SCREEN_PX, display_bars
from sim.report.decimate import BINS, decimate_steps
from sim.report.figures import drawn_note, stacked_timelines, timeline_figure
from sim.report.rows import BAR_WIDTH, trace_rows
from sim.timeline import TimelineBuilder

STEP_S = 1.0


def comm_heavy_timeline(n: int = 10_000):
    """One rank: 4 forwards of 0.25 s, and n 20 µs all-reduces spread evenly over the step."""
    b = TimelineBuilder()
    for mb in range(4):
        b.add(rank=0, lane="compute", kind="fwd", name=f"F{mb}", start_s=mb * 0.25, end_s=(mb + 1) * 0.25,
              stage=0, chunk=0, microbatch=mb)
    starts = np.arange(n) * (STEP_S / n)
    for i, s in enumerate(starts):
        b.add(rank=0, lane="comm.tp", kind="all_reduce", name=f"ar{i}", start_s=float(s), end_s=float(s) + 20e-6,
              stage=0, chunk=0, microbatch=int(s // 0.25))
    b.add(rank=0, lane="comm.pp", kind="recv", name="free recv", start_s=0.5, end_s=0.5, microbatch=2)
    return b.build(TimelineMeta(rank_pp={0: 0}))


def test_sub_pixel_communication_merges_with_its_busy_share():
    shown = display_bars(comm_heavy_timeline())
    comm = shown.bars[shown.bars["lane"] == "comm.tp"]
    # spans 100 µs apart, below a pixel (1 s / 2000 = 500 µs): one bar over the whole step
    assert len(comm) == 1 and shown.resolution_s == pytest.approx(STEP_S / SCREEN_PX)
    assert int(comm["spans"].iloc[0]) == 10_000 == shown.merged_spans
    busy = comm["busy_s"].iloc[0] / (comm["end_s"].iloc[0] - comm["start_s"].iloc[0])
    assert busy == pytest.approx(10_000 * 20e-6 / (STEP_S - STEP_S / 10_000 + 20e-6))  # 0.2
    assert int(comm["microbatch"].iloc[0]) == -1  # it spans several micro-batches: names none


def test_communication_further_apart_than_a_pixel_stays_separate():
    shown = display_bars(comm_heavy_timeline(n=100))  # 10 ms apart
    assert (shown.bars["lane"] == "comm.tp").sum() == 100 and shown.merged_spans == 0


def test_a_timeline_over_the_bar_budget_merges_at_a_coarser_gap():
    # 1,500 all-reduces 0.667 ms apart: separate at 1/2000 of the step (0.5 ms), over a budget of 1,000
    # bars; at 1/1000 (1 ms) they merge into one bar, and the figure says it merged at 1/1000
    tl = comm_heavy_timeline(n=1_500)
    assert (display_bars(tl, budget=10_000).bars["lane"] == "comm.tp").sum() == 1_500
    shown = display_bars(tl, budget=1_000)
    assert shown.screen_px == 1000 and shown.resolution_s == pytest.approx(STEP_S / 1000)
    assert (shown.bars["lane"] == "comm.tp").sum() == 1 and shown.merged_spans == 1_500
    note = drawn_note([shown])
    assert "1,500 communication spans less than 1 ms apart (1/1000 of the step)" in note


def test_the_budget_never_merges_coarser_than_a_250th_of_the_step():
    tl = comm_heavy_timeline(n=100)  # 10 ms apart: separate even at 1/250 (4 ms)
    shown = display_bars(tl, budget=10)
    assert shown.screen_px == 250 and (shown.bars["lane"] == "comm.tp").sum() == 100


def test_stacked_panels_share_one_budget():
    tl = comm_heavy_timeline(n=1_500)
    fig = stacked_timelines([("a", tl), ("b", tl)], "t")  # 2 x 1,504 bars fit 10,000: nothing merged
    assert sum(len(t.x) for t in fig.data if t.name == "all_reduce") == 3_000
    fig = stacked_timelines([(str(i), tl) for i in range(8)], "t")  # 1,250 a panel: merged at 1/1000
    assert sum(len(t.x) for t in fig.data if t.name == "all_reduce") == 8


def test_busy_share_counts_overlapping_spans_once():
    b = TimelineBuilder()  # a measured trace's recv waits overlap: [0, 0.4] and [0.2, 0.6] are busy 0.6 s
    b.add(rank=0, lane="compute", kind="fwd", name="F0", start_s=0.0, end_s=1.0, microbatch=0)
    for s, e in ((0.0, 0.4), (0.2, 0.6)):
        b.add(rank=0, lane="comm.pp", kind="recv", name="r", start_s=s, end_s=e, microbatch=0)
    (bar,) = display_bars(b.build()).bars.query("lane == 'comm.pp'").itertuples()
    assert (bar.start_s, bar.end_s, bar.spans) == (0.0, 0.6, 2) and bar.busy_s == pytest.approx(0.6)


def test_zero_length_spans_are_not_drawn():
    fig = timeline_figure(comm_heavy_timeline(), "t")
    names = {t.name for t in fig.data}
    rows = {y for t in fig.data for y in trace_rows(fig, t)}
    assert "recv" not in names and not any("comm.pp" in r for r in rows)
    assert all(float(np.min(t.x)) > 0 for t in fig.data)


def test_figure_says_what_it_merged():
    fig = timeline_figure(comm_heavy_timeline(), "t")
    note = fig.layout.title.subtitle.text
    assert "10,000 communication spans" in note and "--chrome-trace" in note
    bar = next(t for t in fig.data if t.name == "all_reduce")
    assert float(np.asarray(bar.marker.opacity)[0]) == pytest.approx(0.3)  # busy 20 %, drawn at the 0.3 floor


def test_compute_spans_of_one_action_merge_across_collectives():
    b = TimelineBuilder()
    for layer in range(3):  # one forward split by two collectives
        b.add(rank=0, lane="compute", kind="fwd", name=f"L{layer}", start_s=layer * 1.0, end_s=layer + 0.8,
              stage=0, chunk=0, microbatch=0)
    bars = display_bars(b.build()).bars
    assert len(bars) == 1 and bars["start_s"].iloc[0] == 0 and bars["end_s"].iloc[0] == pytest.approx(2.8)
    assert bars["label"].iloc[0] == "F0"


def test_step_work_apart_by_a_wait_stays_two_bars():
    # the gradient norm, then the optimizer update after the norm's all-reduce (schedules.step_end_syncs)
    b = TimelineBuilder()
    b.add(rank=0, lane="compute", kind="fwd", name="F0", start_s=0.0, end_s=1.0, stage=0, chunk=0, microbatch=0)
    b.add(rank=0, lane="compute", kind="optimizer", name="grad_norm", start_s=1.0, end_s=1.1)
    b.add(rank=0, lane="compute", kind="optimizer", name="optimizer.step", start_s=1.5, end_s=2.0)
    b.add(rank=0, lane="compute", kind="optimizer", name="grad_buffer.zero", start_s=2.0, end_s=2.1)
    bars = display_bars(b.build()).bars
    step = bars[bars["kind"] == "optimizer"]
    assert list(zip(step["start_s"], step["end_s"], strict=True)) == [(1.0, 1.1), (1.5, pytest.approx(2.1))]


def test_decimation_keeps_envelope_and_ends():
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 100, 50_000))
    y = np.cumsum(rng.normal(size=x.size))
    keep = decimate_steps(x, y)
    assert keep.size <= 4 * BINS
    assert keep[0] == 0 and keep[-1] == x.size - 1
    assert y[keep].max() == y.max() and y[keep].min() == y.min()
    # every bin's extremes survive: over any run of whole bins (here tenths of the range) the envelope is exact
    edges = np.linspace(x[0], x[-1], 11)
    edges[-1] = np.inf
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside, kept = (x >= lo) & (x < hi), (x[keep] >= lo) & (x[keep] < hi)
        assert y[keep][kept].max() == y[inside].max()


def test_short_curves_are_kept_whole():
    assert decimate_steps(np.arange(100.0), np.arange(100.0)).tolist() == list(range(100))


def test_every_bar_is_three_quarters_of_a_row_thick():
    """Rows are numbers 0, 1, 2...: a trace left to plotly's default would size its bars by its two
    closest rows (three rows apart for a trace on every third row: bars over their neighbours)."""
    fig = stacked_timelines([("a", comm_heavy_timeline(n=100)), ("b", comm_heavy_timeline(n=100))], "t")
    assert fig.data and all(t.width == BAR_WIDTH == 0.75 and t.offset is None for t in fig.data)
    assert list(fig.layout.yaxis.tickvals) == list(range(len(fig.layout.yaxis.ticktext)))
    assert tuple(fig.layout.yaxis.range) == (len(fig.layout.yaxis.ticktext) - 0.5, -0.5)  # first row on top


def test_gathers_and_reductions_share_their_row_in_halves():
    b = TimelineBuilder()
    b.add(rank=0, lane="compute", kind="fwd", name="F0", start_s=0.0, end_s=1.0, microbatch=0)
    for kind in ("all_gather", "reduce_scatter"):  # overlapping in time on one lane
        b.add(rank=0, lane="comm.dp", kind=kind, name=kind, start_s=0.2, end_s=0.8)
    fig = timeline_figure(b.build(TimelineMeta(rank_pp={0: 0})), "t")
    ag, rs = (next(t for t in fig.data if t.name == k) for k in ("all_gather", "reduce_scatter"))
    assert ag.width == rs.width == BAR_WIDTH / 2 and (ag.offset, rs.offset) == (-BAR_WIDTH / 2, 0.0)
    assert trace_rows(fig, ag) == trace_rows(fig, rs) == ["rank 0 (pp 0) · comm.dp"]
