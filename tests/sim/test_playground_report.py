"""The schedule playground's figure and output: time in units of one forward, only drawn lanes and
kinds, a shade and a label per chunk, idle time hatched, closed-form bubbles beside the measured
ones, several schedules stacked on one axis.

Ground truth: 1F1B's step is (m+p-1)(F+B) and its bubble (p-1)/(m+p-1); interleaved 1F1B's bubble
is (p-1)/(v·m+p-1) (Narayanan et al. 2021); ZB-H1's idle per rank (p-1)·T_F and ZB-V's (p-1)
chunk units when T_F = T_B = T_W (Qi et al. 2023, and the schedule modules)."""

import json
import re
from fractions import Fraction

import numpy as np
import pytest

from schedules.pipeline import build_schedule
from sim.bubble import closed_form_bubble
from sim.cli.main import main
from sim.playground import UnitCosts, run_playground
from sim.report.figures import bar_starts
from sim.report.playground import playground_figure
from sim.report.rows import trace_rows

P, M = 4, 8


def run(name, vpp=1, **costs):
    return run_playground(build_schedule(name, P, M, vpp), UnitCosts(**costs))


def drawn(fig, name):
    return [t for t in fig.data if t.name == name]


def bar_ends(fig):
    return max(float(np.max(bar_starts(t) + np.asarray(t.x))) for t in fig.data)


@pytest.mark.parametrize(("fwd", "bwd", "weight"), [(1.0, 2.0, 1.0), (2.0, 4.0, 2.0), (0.5, 1.0, 0.5)])
def test_axis_is_in_units_of_one_forward(fwd, bwd, weight):
    fig = playground_figure([run("1f1b", forward_s=fwd, backward_s=bwd, backward_weight_s=weight)])
    assert fig.layout.xaxis.title.text == "time (units of one forward, --fwd)"
    assert bar_ends(fig) == pytest.approx((M + P - 1) * (fwd + bwd) / fwd)  # 33 forwards, whatever --fwd is


def test_only_drawn_lanes_and_kinds():
    fig = playground_figure([run("1f1b")])  # sends cost nothing: no comm lane, no send/recv entry
    rows = {y for t in fig.data for y in trace_rows(fig, t)}
    assert rows == {f"rank {r} (pp {r}) · compute" for r in range(P)}
    assert {t.name for t in fig.data if t.showlegend} == {"fwd", "bwd", "idle (bubble)"}
    fig = playground_figure([run("1f1b", p2p_s=0.25)])
    assert {t.name for t in fig.data if t.showlegend} >= {"send"}
    assert any("comm.pp" in y for t in drawn(fig, "send") for y in trace_rows(fig, t))


def test_chunks_have_a_shade_each_and_every_block_a_label():
    fig = playground_figure([run("interleaved", vpp=2)])
    traces = {t.name: t for t in fig.data if t.name != "idle (bubble)"}
    assert set(traces) == {"fwd chunk 0", "fwd chunk 1", "bwd chunk 0", "bwd chunk 1"}
    assert len({t.marker.color for t in traces.values()}) == 4
    labels = [(name, text) for name, t in traces.items() for text in t.text]
    assert len(labels) == P * M * 2 * 2  # every F and B of every micro-batch and chunk
    for name, text in labels:
        m = re.fullmatch(r"([FB])(\d+)<br>c(\d)", text)
        assert m and int(m[2]) < M and name == f"{'fwd' if m[1] == 'F' else 'bwd'} chunk {m[3]}"


@pytest.mark.parametrize(("name", "vpp", "closed"), [("1f1b", 1, Fraction(3, 11)), ("interleaved", 2, Fraction(3, 19))])
def test_hatched_idle_time_is_the_bubble(name, vpp, closed):
    result = run(name, vpp=vpp)
    fig = playground_figure([result])
    (idle,) = drawn(fig, "idle (bubble)")
    step_fwd = result.metrics.step_time_s  # --fwd = 1
    assert float(np.sum(idle.x)) / (P * step_fwd) == pytest.approx(float(closed), abs=1e-6)


@pytest.mark.parametrize(("name", "vpp", "p", "m", "expected"), [
    ("gpipe", 1, 4, 8, Fraction(3, 11)), ("1f1b", 1, 8, 3, Fraction(7, 10)),
    ("interleaved", 2, 4, 8, Fraction(3, 19)), ("interleaved", 3, 4, 5, Fraction(3, 18)),
    ("zb-h1", 1, 4, 8, Fraction(3, 27)), ("zb-h1", 1, 8, 9, Fraction(7, 34)),
    ("zbv", 2, 4, 8, Fraction(3, 51)), ("zbv", 2, 3, 5, Fraction(2, 32)),
])
def test_closed_forms_equal_the_literature_and_the_simulation(name, vpp, p, m, expected):
    result = run_playground(build_schedule(name, p, m, vpp), UnitCosts())
    assert result.closed_form is not None and result.closed_form.value == expected
    assert result.metrics.bubble_fraction == pytest.approx(float(expected), abs=1e-9)


@pytest.mark.parametrize(("name", "vpp", "p", "m", "costs"), [
    ("zb-h1", 1, 4, 8, (1.0, 3.0, 0.5, 0.0)),   # T_F, T_B, T_W unequal: the modules give no formula
    ("interleaved", 2, 4, 2, (1.0, 2.0, 1.0, 0.0)),  # m < p
    ("1f1b", 1, 4, 8, (1.0, 2.0, 1.0, 0.1)),     # sends cost time
    ("zbv", 2, 4, 5, (1.0, 2.0, 1.0, 0.0)),      # m < 2p - 1
    ("dualpipev", 2, 4, 8, (1.0, 2.0, 1.0, 0.0)),  # no closed form in its module
])
def test_no_closed_form_outside_its_conditions(name, vpp, p, m, costs):
    assert closed_form_bubble(build_schedule(name, p, m, vpp), *costs) is None


def test_schedules_stack_on_one_axis_with_a_row_each(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["schedule", "--schedule", "1f1b,interleaved", "--pp", "4", "--microbatches", "8"]) == 0
    out = capsys.readouterr().out
    row_1f1b = next(line for line in out.splitlines() if line.startswith("│ 1f1b "))
    row_inter = next(line for line in out.splitlines() if line.startswith("│ interleaved "))
    assert "33" in row_1f1b and "0.2727" in row_1f1b and "(p−1)/(m+p−1) = 3/11 = 0.2727" in row_1f1b
    assert "28.5" in row_inter and "0.1579" in row_inter and "(p−1)/(v·m+p−1) = 3/19 = 0.1579" in row_inter
    html = (tmp_path / "schedule.html").read_text()
    assert "3/11 = 0.2727" in html and "3/19 = 0.1579" in html
    fig = playground_figure([run("1f1b"), run("interleaved", vpp=2)])
    x1, x2 = fig.layout.xaxis, fig.layout.xaxis2
    assert x2.matches == "x" or x1.matches == "x2"  # one shared axis
    assert x1.showticklabels and x2.showticklabels and x1.title.text == x2.title.text
    assert list(x1.range) == pytest.approx([0, 33])


def test_json_lists_several_schedules(capsys):
    assert main(["schedule", "--schedule", "1f1b,interleaved", "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["schedule"] for d in docs] == ["1f1b", "interleaved"] and [d["vpp"] for d in docs] == [1, 2]
    assert docs[0]["bubble_closed_form"] == pytest.approx(3 / 11) and docs[1]["bubble_formula"] == "(p−1)/(v·m+p−1)"


def test_vpp_applies_to_the_chunked_schedules_only(capsys):
    assert main(["schedule", "--schedule", "1f1b,interleaved", "--vpp", "4", "--json"]) == 0
    assert [d["vpp"] for d in json.loads(capsys.readouterr().out)] == [1, 4]
    assert main(["schedule", "--schedule", "1f1b", "--vpp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vpp=2" in err
