"""compare: one legend for every panel, a time axis under each, --microbatches, and fits read as
yes/no in the terminal and in the HTML alike."""

import json

import pytest

from sim.cli.cmd_compare import job_for
from sim.cli.main import build_parser, main
from sim.report.figures import stacked_timelines
from sim.simulate import simulate

SMALL = ["--model", "small", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "2", "--pp", "2"]
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


@pytest.fixture(scope="module")
def figure():
    args = build_parser().parse_args(["compare", *SMALL, "--global-batch", "8"])
    results = [simulate(job_for(args, name, 2 if name == "interleaved" else 1)) for name in SCHEDULES]
    return stacked_timelines([(name, r.timeline) for name, r in zip(SCHEDULES, results, strict=True)], "t")


def test_one_legend_entry_per_kind_across_panels(figure):
    shown = [t.name for t in figure.data if t.showlegend is not False]
    assert len(shown) == len(set(shown))  # each entry once
    assert set(shown) == {t.name for t in figure.data}  # and every drawn kind has one
    # ZB-H1 (the last panel) is the only one with weight-gradient blocks: they still get an entry
    weight = [t for t in figure.data if t.name == "bwd_weight chunk 0"]
    assert weight and all(t.yaxis == "y4" for t in weight) and weight[0].showlegend is not False


def test_one_chunk_schedules_share_the_interleaved_chunk_0_entry(figure):
    """With interleaving in one panel, 1F1B's forward is chunk 0 too: one entry and one colour,
    not 'fwd' beside a near-identical 'fwd chunk 0'."""
    names = {t.name for t in figure.data}
    assert {"fwd chunk 0", "fwd chunk 1", "bwd chunk 0", "bwd chunk 1"} <= names and not {"fwd", "bwd"} & names
    fwd0 = [t for t in figure.data if t.name == "fwd chunk 0"]
    assert {t.yaxis for t in fwd0} == {"y", "y2", "y3", "y4"} and len({t.marker.color for t in fwd0}) == 1


def test_a_time_axis_under_each_panel(figure):
    axes = [figure.layout[f"xaxis{i if i > 1 else ''}"] for i in range(1, len(SCHEDULES) + 1)]
    assert all(a.showticklabels for a in axes)
    assert [a.title.text for a in axes] == ["time (ms)"] * len(SCHEDULES)
    assert len({tuple(a.range) for a in axes}) == 1  # one time scale


def test_microbatches_sets_the_global_batch(capsys):
    # TP2 PP2 on 8 GPUs: dp 2; 6 micro-batches of 1 sequence per pipeline = global batch 12
    assert main(["compare", "--schedules", "1f1b,zb-h1", *SMALL, "--microbatches", "6", "--json"]) == 0
    plans = [o["config"]["plan"] for o in json.loads(capsys.readouterr().out)]
    assert [p["global_batch"] for p in plans] == [6 * p["dp"] * p["microbatch_size"] for p in plans] == [12, 12]


def test_microbatches_with_global_batch_is_one_line(capsys):
    assert main(["compare", *SMALL, "--microbatches", "6", "--global-batch", "8", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "microbatches=6" in err and "--global-batch" in err


def test_fits_reads_yes_no_in_terminal_and_html(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # Llama-3 70B on one node at TP8: the optimizer states alone exceed HBM (does not fit); small fits
    assert main(["compare", "--schedules", "1f1b", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "1",
                 "--tp", "8", "--pp", "1", "--global-batch", "4"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("│ 1f1b "))
    assert " no " in row and "NO" not in row and "False" not in row
    html = (tmp_path / "compare.html").read_text()
    assert "<td>no</td>" in html and "<td>False</td>" not in html
