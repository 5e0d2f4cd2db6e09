"""When every plan is pruned, explore says why (counts per reason, in words), exits 2 if no plan
could even run, and its report explains instead of drawing empty axes; the Pareto axes read
as dollars and days."""

import json
import re

import pytest
from test_report_browser import CHROMIUM, rendered_dom

from schedules.model_presets import get_model
from sim.cli.main import main
from sim.explore.display import log_ticks
from sim.explore.figures import pareto_figure
from sim.memory import GIB

NARROW = ["--schedule", "1f1b", "--zero", "1", "--microbatch-size", "1", "--recompute", "none", "--workers", "1"]


def run(capsys, *argv):
    code = main(["explore", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tp_that_divides_no_gpu_count_exits_2_saying_why_and_writes_nothing(capsys, tmp_path):
    code, _, err = run(capsys, "--model", "llama3-70b", "--cluster", "dgx-h100:8", "--tp", "3", "--pp", "1,2",
                       *NARROW, "--out", str(tmp_path / "s"))
    assert code == 2
    assert err.strip() == ("trainsim explore: error: no plan can run: dgx-h100/8: tp*cp*pp (3, 6) does not divide "
                           "8 GPUs: 2 plans")
    assert not (tmp_path / "s").exists()


def test_a_plan_rule_is_quoted_with_its_count(capsys, tmp_path):
    # Llama 3 8B has 32 attention heads: tp 3 cannot split them (24 GPUs = tp 3 x dp 8).
    code, _, err = run(capsys, "--model", "llama3-8b", "--cluster", "dgx-h100:24", "--tp", "3", "--pp", "1",
                       "--global-batch", "64", *NARROW, "--out", str(tmp_path / "s"))
    assert code == 2
    assert "tp=3 is invalid: must divide num_heads=32: 1 plan" in err
    assert len(err.strip().splitlines()) == 1


def test_plans_that_run_but_do_not_fit_exit_0_with_the_explanation_and_an_explaining_report(capsys, tmp_path):
    # 70B parameters with Adam in mixed precision hold at least 16 bytes each (bf16 weights and
    # gradients, fp32 master weights and two moments: ZeRO, Rajbhandari et al. 2020) = 1.13 TB,
    # over 8 GPUs at most: more than an 80 GB H100 however the plan shards them.
    code, out, _ = run(capsys, "--model", "llama3-70b", "--cluster", "dgx-h100:8", "--tp", "8", "--pp", "1,2",
                       "--global-batch", "64", *NARROW, "--out", str(tmp_path / "s"))
    assert code == 0
    assert "0 plans evaluated" in out
    line = next(x for x in out.splitlines() if x.startswith("no plan left on dgx-h100/8: "))
    assert "does not fit in 80 GiB (76.0 GiB usable; smallest peak" in line
    peak = float(re.search(r"smallest peak ([\d.]+) GiB", line).group(1))
    assert peak >= 16 * get_model("llama3-70b").num_params() / 8 / GIB
    html = (tmp_path / "s" / "report.html").read_text()
    assert "No plan left to evaluate" in html and "smallest peak" in html
    assert "plotly-graph-div" not in html and "plotly-graph-div" not in (tmp_path / "s" / "pareto.html").read_text()


def test_a_design_with_no_plan_beside_one_with_plans_is_explained(capsys, tmp_path):
    code, out, _ = run(capsys, "--model", "llama3-70b", "--cluster", "dgx-a100:8,dgx-h100:64", "--tp", "8",
                       "--pp", "1,2,4", "--global-batch", "64", "--tokens", "1e9", *NARROW, "--no-report", "--json",
                       "--out", str(tmp_path / "s"))
    assert code == 0
    summary = json.loads(out)
    assert list(summary["no_plan_left"]) == ["dgx-a100/8"]
    assert summary["no_plan_left"]["dgx-a100/8"].startswith("does not fit in 80 GiB")
    plans = {d["design"]: d["plans"] for d in summary["designs"]}
    assert plans["dgx-a100"] == 0 and plans["dgx-h100"] > 0 and summary["evaluated"] == plans["dgx-h100"]


# ---- Pareto axes ----

def _row(days, cost, design="dgx-h100", gpus=512):
    return {"id": f"{design}/{gpus}/{days}", "design": design, "gpus": gpus, "time_to_train_days": days,
            "cost_usd": cost, "step_time_s": 1.0, "mfu": 0.5, "price_per_gpu_hour_usd": 2.0, "tp": 4, "cp": 1,
            "pp": 2, "dp": 64, "vpp": 1, "schedule": "1f1b", "microbatch_size": 1, "zero": 1,
            "sequence_parallel": True, "recompute": "none", "peak_memory_gib": 1.0, "usable_hbm_gib": 76.0}


SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
DAYS = {"min": 1 / 1440, "h": 1 / 24, "d": 1.0}


def _money(text):
    m = re.fullmatch(r"\$(\d+(?:\.\d+)?)([KMBT]?)", text)
    assert m, text
    return float(m.group(1)) * SCALE.get(m.group(2), 1)


def _days(text):
    m = re.fullmatch(r"(\d[\d,]*(?:\.\d+)?) (min|h|d)", text)
    assert m, text
    return float(m.group(1).replace(",", "")) * DAYS[m.group(2)]


@pytest.mark.parametrize("spread", [1.5, 10, 1000])
def test_pareto_ticks_read_as_the_dollars_and_durations_they_mark(spread):
    rows = [_row(0.5 * spread**(i / 9), 4e5 * spread**(1 - i / 9)) for i in range(10)]
    rows += [_row(2 * d, 3 * c, "dgx-a100", 1024) for d, c in ((0.6, 5e5), (3, 2e5))]
    fig = pareto_figure(rows, rows[:10], "t")
    for axis, parse in ((fig.layout.xaxis, _days), (fig.layout.yaxis, _money)):
        assert axis.type == "log" and "log scale" in axis.title.text
        for value, text in zip(axis.tickvals, axis.ticktext, strict=True):
            assert parse(text) == pytest.approx(value, rel=0.005)
        lo, hi = (10**v for v in axis.range)
        assert len([v for v in axis.tickvals if lo <= v <= hi]) >= 3
    assert "USD" in fig.layout.yaxis.title.text and "days" in fig.layout.xaxis.title.text


def test_log_ticks_are_one_two_five_style_and_fill_the_view():
    assert log_ticks((1, 1000)) == [1, 3, 10, 30, 100, 300, 1000]
    assert log_ticks((1, 10)) == [1, 1.5, 2, 3, 4, 5, 7, 10]
    assert log_ticks((4.7e5, 5.6e6)) == [5e5, 7e5, 1e6, 1.5e6, 2e6, 3e6, 4e6, 5e6]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.slow
def test_pareto_renders_with_labelled_ticks_in_chromium(capsys, tmp_path):
    code, _, _ = run(capsys, "--model", "small", "--cluster", "dgx-h100:8,dgx-a100:16", "--tokens", "1e11",
                     "--global-batch", "32", *NARROW, "--verify", "0", "--out", str(tmp_path / "s"))
    assert code == 0
    dom = rendered_dom(tmp_path / "s" / "pareto.html", tmp_path / "profile")
    labels = {axis: re.findall(rf'class="{axis}tick"><text[^>]*>([^<]+)</text>', dom) for axis in ("x", "y")}
    assert len(labels["x"]) >= 3 and len(labels["y"]) >= 3
    for text in labels["x"]:
        _days(text)
    for text in labels["y"]:
        _money(text)


def test_fp8_on_a_design_without_fp8_math_prunes_that_design_only(capsys, tmp_path):
    """--dtype fp8 over an H100 and an A100 design: the A100's plans are pruned by plan rule (it has
    no FP8 tensor-core math), the H100's are timed; the A100 alone is an error naming the device
    (was: an error from deep inside the pricing after the H100's plans had run)."""
    narrow = [*NARROW, "--tp", "2", "--pp", "1", "--global-batch", "16", "--dtype", "fp8", "--no-report", "--json"]
    code, out, _ = run(capsys, "--model", "llama3-8b", "--cluster", "dgx-h100:8,dgx-a100:8", *narrow,
                       "--out", str(tmp_path / "both"))
    assert code == 0
    designs = {row["design"] for row in json.loads(out)["best"]}
    assert designs == {"dgx-h100"}
    code, _, err = run(capsys, "--model", "llama3-8b", "--cluster", "dgx-a100:8", *narrow, "--out", str(tmp_path / "a100"))
    assert code == 2
    assert "device 'a100-80gb' has no fp8 math (it supports fp32, tf32, bf16, fp16): 1 plan" in err
    assert len(err.strip().splitlines()) == 1


def test_the_pruned_table_has_every_reason_of_every_design():
    """Designs pruned for different reasons share one set of columns, in the rules' order (was:
    the first design's keys, so an A100's plan-rule count was dropped beside an H100's memory)."""
    from sim.explore.report import pruned_rows

    rows = pruned_rows({"dgx-h100/8": {"gpus % (tp*cp*pp)": 5, "memory": 2, "evaluated": 3},
                        "dgx-a100/8": {"gpus % (tp*cp*pp)": 5, "plan rules": 7, "evaluated": 0}})
    assert [list(r) for r in rows] == [["design/gpus", "gpus % (tp*cp*pp)", "plan rules", "memory", "evaluated"]] * 2
    assert rows[0]["plan rules"] == 0 and rows[1]["plan rules"] == 7 and rows[1]["memory"] == 0


def test_an_unknown_framework_preset_is_one_line_and_exit_2(capsys, tmp_path):
    """`explore --framework` takes simulate's presets; a wrong name (on the command line, or in a
    hand-edited spec.json) says which are valid in one line."""
    from sim.explore.spec import SearchSpace

    code, _, err = run(capsys, "--model", "llama3-8b", "--cluster", "dgx-h100:8", "--framework", "megatron-2019",
                       "--out", str(tmp_path / "s"))
    assert code == 2 and "--framework: invalid choice: 'megatron-2019'" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="megatron-core") as info:
        SearchSpace(framework_preset="megatron-2019")
    assert "\n" not in str(info.value)
