"""The schedule playground's report: one panel per schedule on a shared axis in units of one
forward, idle time hatched, and the bubble measured beside its closed form."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go

from sim.playground import PlaygroundResult, bubble_row, closed_form_text
from sim.report.figures import stacked_timelines
from sim.report.html import PlotlyJs, Report
from sim.report.style import TimelineStyle, forward_units

ROW_PX = 44  # taller rows than a simulation's: room for a label turned upright in a narrow chunk bar
BUBBLE_NOTE = ("The bubble fraction is the mean over ranks of the share of the step a rank's compute is idle "
               "(hatched). Closed forms assume uniform stages and free sends: (p−1)/(m+p−1) for GPipe and "
               "1F1B, (p−1)/(v·m+p−1) for interleaved 1F1B (m ≥ p), (p−1)/(3m+p−1) for ZB-H1 and "
               "(p−1)/(6m+p−1) for ZB-V when forward, input-gradient and weight-gradient passes cost the same; "
               "p ranks, m micro-batches, v chunks per rank.")


def panel_title(result: PlaygroundResult) -> str:
    """"1f1b, vpp 1: step 33, bubble 0.2727 measured, (p−1)/(m+p−1) = 3/11 = 0.2727"."""
    s, m = result.schedule, result.metrics
    unit = forward_units(result.costs.forward_s)
    closed = "closed form " + closed_form_text(result)
    step = f"{m.step_time_s:.4g}" + (f" ({m.step_time_s * unit.scale:.4g} {unit.unit})" if unit.scale != 1 else "")
    return f"{s.name}, vpp {s.vpp}: step {step}, bubble {m.bubble_fraction:.4f} measured, {closed}"


def playground_figure(results: Sequence[PlaygroundResult]) -> go.Figure:
    """The schedules' timelines stacked (shared time axis in units of --fwd, idle hatched)."""
    first = results[0].schedule
    title = f"pp={first.pp}, m={first.microbatches}: " + " vs ".join(r.schedule.name for r in results)
    style = TimelineStyle(axis=forward_units(results[0].costs.forward_s), shade_idle=True, row_px=ROW_PX,
                          uniform_labels=False)
    return stacked_timelines([(panel_title(r), r.timeline) for r in results], title, style)


def write_playground_report(results: Sequence[PlaygroundResult], path: str | Path,
                            plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
    """Table of step time and bubbles, then the stacked timelines."""
    first = results[0]
    names = ", ".join(r.schedule.name for r in results)
    rep = Report(f"trainsim schedule — {names}, pp={first.schedule.pp}, m={first.schedule.microbatches}")
    c = first.costs
    rep.note(f"Unit costs per pipeline rank: forward {c.forward_s:g}, backward {c.backward_s:g} (weight "
             f"gradient {c.backward_weight_s:g}), send {c.p2p_s:g}; with v chunks each chunk takes 1/v of "
             "them. Times below are in units of one forward.")
    rep.table([bubble_row(r) for r in results])
    rep.note(BUBBLE_NOTE)
    rep.figure(playground_figure(results))
    return rep.write(path, plotly_js)
