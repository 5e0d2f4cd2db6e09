"""``trainsim explore`` for a buyer: designs paired with GPU counts, simulate's flag names, prices
shown with their source, money as dollars, and defaults for the tokens and the global batch."""

import json
import re

import pytest

from schedules.model_presets import get_model
from sim.cli.explore_args import spec_from_args
from sim.cli.main import build_parser, main
from sim.explore.defaults import default_global_batch, default_tokens
from sim.explore.display import usd, usd_short
from sim.explore.rank import to_verify
from topo import get_cluster

FAST = ["--model", "small", "--tokens", "1e9", "--global-batch", "32", "--schedule", "1f1b", "--zero", "1",
        "--microbatch-size", "1", "--recompute", "none", "--workers", "1"]


def spec_of(*argv):
    """The SweepSpec ``trainsim explore ARGV`` describes (nothing is run)."""
    return spec_from_args(build_parser().parse_args(["explore", *argv]))


def run(capsys, *argv):
    try:
        code = main(["explore", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- designs paired with GPU counts ----

def test_pairs_sweep_exactly_the_pairs_and_separate_flags_the_cross_product(capsys, tmp_path):
    code, out, _ = run(capsys, *FAST, "--cluster", "dgx-h100:16,dgx-a100:32", "--no-report", "--json",
                       "--out", str(tmp_path / "pairs"))
    assert code == 0
    rows = json.loads((tmp_path / "pairs" / "results.json").read_text())["rows"]
    assert {(r["design"], r["gpus"]) for r in rows} == {("dgx-h100", 16), ("dgx-a100", 32)}
    assert [(d["design"], d["gpus"]) for d in json.loads(out)["designs"]] == [("dgx-h100", 16), ("dgx-a100", 32)]
    assert spec_of("--model", "small", "--clusters", "dgx-h100,dgx-a100", "--gpus", "16,32").points() == [
        ("dgx-h100", 16), ("dgx-h100", 32), ("dgx-a100", 16), ("dgx-a100", 32)]


def test_pairs_mix_with_gpus_and_nodes_and_survive_resume(capsys, tmp_path):
    assert spec_of("--model", "small", "--cluster", "dgx-h100:16,aws-p4d,dgx-h100:32", "--gpus", "8").points() == [
        ("dgx-h100", 16), ("dgx-h100", 32), ("aws-p4d", 8)]
    assert spec_of("--model", "small", "--cluster", "dgx-h100,dgx-a100:8", "--nodes", "2,4").points() == [
        ("dgx-h100", 16), ("dgx-h100", 32), ("dgx-a100", 8)]
    out = tmp_path / "s"
    assert main(["explore", *FAST, "--cluster", "dgx-h100:16,aws-p4d:8", "--no-report", "--out", str(out)]) == 0
    capsys.readouterr()
    code, printed, _ = run(capsys, "--resume", str(out), "--workers", "1", "--no-report", "--json")
    assert code == 0
    assert {(d["design"], d["gpus"]) for d in json.loads(printed)["designs"]} == {("dgx-h100", 16), ("aws-p4d", 8)}


@pytest.mark.parametrize(("cluster", "extra", "needles"), [
    ("dgx-h100:12", [], ["cluster='dgx-h100:12'", "multiple of 8"]),
    ("dgx-h100:0", [], ["cluster='dgx-h100:0'", "multiple of 8"]),
    ("dgx-h100:lots", [], ["cluster='dgx-h100:lots'", "DESIGN:GPUS"]),
    ("dgx-h100:512,dgx-h99:512", [], ["dgx-h99", "dgx-a100"]),
    ("dgx-h100", [], ["cluster='dgx-h100'", "dgx-h100:512"]),
    ("dgx-h100,aws-p4d", ["--gpus", "12"], ["gpus='12'", "multiple of 8"]),
    ("dgx-h100", ["--gpus", "8", "--nodes", "1"], ["--nodes", "--gpus"]),
    ("dgx-h100:8,dgx-a100:8", ["--price", "2.5"], ["price='2.5'", "dgx-h100, dgx-a100"]),
])
def test_bad_designs_are_one_line_naming_the_item_and_what_is_valid(capsys, tmp_path, cluster, extra, needles):
    code, out, err = run(capsys, "--model", "small", "--cluster", cluster, *extra, "--out", str(tmp_path / "s"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    for needle in needles:
        assert needle in err
    assert not (tmp_path / "s").exists()


# ---- simulate's flag names ----

SHARED = ("--model", "--seq-len", "--global-batch", "--cluster", "--nodes", "--price", "--tp", "--pp", "--cp",
          "--vpp", "--zero", "--microbatch-size", "--schedule", "--sequence-parallel", "--no-sequence-parallel",
          "--recompute", "--dtype", "--uneven-stages")


def test_explore_accepts_the_flags_simulate_names_the_same_way():
    subparsers = build_parser()._subparsers._group_actions[0].choices
    simulate, explore = (set(subparsers[c]._option_string_actions) for c in ("simulate", "explore"))
    assert set(SHARED) <= simulate & explore


def test_simulate_style_values_build_the_same_sweep_as_explores_lists():
    simulate_style = spec_of("--model", "small", "--cluster", "dgx-h100", "--nodes", "2", "--seq-len", "256",
                             "--global-batch", "64", "--tp", "2", "--pp", "2", "--microbatch-size", "2",
                             "--schedule", "zb-h1", "--zero", "1", "--sequence-parallel", "--recompute", "full",
                             "--price", "2.5", "--uneven-stages", "--dtype", "fp8")
    old_names = spec_of("--model", "small", "--clusters", "dgx-h100", "--gpus", "16", "--seq-len", "256",
                        "--global-batch", "64", "--tp", "2", "--pp", "2", "--microbatch-sizes", "2",
                        "--schedules", "zb-h1", "--zero", "1", "--sequence-parallel", "on", "--recompute", "full",
                        "--price", "dgx-h100=2.5/gpu-hour", "--uneven-stages", "--dtype", "fp8")
    assert simulate_style.points() == old_names.points() == [("dgx-h100", 16)]
    assert simulate_style.space == old_names.space
    assert simulate_style.prices == old_names.prices == (("dgx-h100", 2.5),)
    assert spec_of("--model", "small", "--cluster", "dgx-h100:8", "--no-sequence-parallel").space.sequence_parallel == (
        False,)


# ---- prices: shown, with their source ----

def test_prices_of_different_bases_are_labelled(capsys, tmp_path):
    """Issue 28: aws-p5 at $12.29 and dgx-h100 at $2.99 (the same H100) were shown with no basis."""
    code, out, _ = run(capsys, *FAST, "--cluster", "dgx-h100:8,aws-p5:8", "--verify", "0", "--out", str(tmp_path / "a"))
    assert code == 0
    assert "(preset, on-demand hyperscaler instance / 8 GPUs: AWS EC2 p5.48xlarge $98.32/h, us-east-1 (2023-07" in out
    assert "note: the presets' prices have different bases (on-demand GPU cloud, on-demand hyperscaler)" in out


def test_price_per_gpu_hour_and_its_source_are_in_the_terminal_json_and_report(capsys, tmp_path):
    argv = [*FAST, "--cluster", "dgx-h100:8,aws-p4d:8", "--price", "aws-p4d=80/node-hour", "--verify", "0"]
    code, out, _ = run(capsys, *argv, "--out", str(tmp_path / "a"))
    assert code == 0
    h100 = get_cluster("dgx-h100").price_per_gpu_hour_usd  # the preset's list price
    assert f"{usd(h100)}/GPU-hour (preset, on-demand GPU cloud, per GPU: Lambda 8x H100 SXM (2024, RECALLED))" in out
    assert "$10.00/GPU-hour (--price)" in out  # $80 per 8-GPU node-hour
    assert "different bases" not in out  # aws-p4d's preset price is not used
    html = (tmp_path / "a" / "report.html").read_text()
    assert "preset, on-demand GPU cloud" in html and "--price" in html and usd(h100) in html
    code, printed, _ = run(capsys, *argv, "--json", "--out", str(tmp_path / "b"))
    designs = {d["design"]: d for d in json.loads(printed)["designs"]}
    assert designs["dgx-h100"]["usd/gpu-h"] == h100
    assert designs["dgx-h100"]["price_source"] == "preset, on-demand GPU cloud"
    assert designs["aws-p4d"]["usd/gpu-h"] == 10.0 and designs["aws-p4d"]["price_source"] == "--price"


# ---- money ----

@pytest.mark.parametrize(("value", "text", "short"), [
    (707312.3, "$707,300", "$707K"), (1045123.0, "$1,045,000", "$1.05M"), (2.99, "$2.99", "$2.99"),
    (1.5, "$1.50", "$1.5"), (0.72614, "$0.7261", "$0.726"), (3.2e9, "$3,200,000,000", "$3.2B"),
])
def test_money_reads_as_dollars(value, text, short):
    assert (usd(value), usd_short(value)) == (text, short)


SCIENTIFIC = re.compile(r"\d[eE][+-]\d")


def test_costs_print_as_dollars_in_terminal_and_report_and_stay_numbers_in_json(capsys, tmp_path):
    argv = [*FAST, "--cluster", "dgx-h100:8", "--tokens", "1e12", "--verify", "1"]
    code, out, _ = run(capsys, *argv, "--out", str(tmp_path / "a"))
    assert code == 0
    tables = [line for line in out.splitlines() if line.startswith("│")]
    assert tables and not any(SCIENTIFIC.search(line) for line in tables)
    html = (tmp_path / "a" / "report.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", html)
    assert cells and not any(SCIENTIFIC.search(c) for c in cells)
    code, printed, _ = run(capsys, *argv, "--json", "--no-report", "--out", str(tmp_path / "b"))
    best = json.loads(printed)["best"][0]
    assert isinstance(best["cost_usd"], float)
    assert usd(best["cost_usd"]) in out and usd(best["cost_usd"]) in cells


# ---- defaults for tokens and global batch ----

def test_default_tokens_are_chinchillas_20_per_parameter():
    # Hoffmann et al. 2022 trained the 70B Chinchilla on 1.4T tokens.
    assert default_tokens(get_model("llama3-70b")) == pytest.approx(1.4e12, rel=0.01)
    assert default_tokens(get_model("llama3-8b")) == 1.61e11  # 20 x 8.03B parameters


@pytest.mark.parametrize(("seq_len", "gpus", "batch"), [
    (8192, (512, 1024), 512),  # 512 x 8192 = 4,194,304 tokens exactly
    (2048, (256, 512), 2048),
    (8192, (24,), 504),  # the multiple of 24 nearest 512: dp 1, 2, 3, 4, 6, 8, 12, 24 all divide it
    (8192, (1000,), 500),  # 500 divides 1000: dp 2 .. 1000 / (tp*pp) split it when they divide 500
    (131072, (64,), 32),
])
def test_default_global_batch_is_about_4m_tokens_splitting_over_the_gpu_counts(seq_len, gpus, batch):
    got = default_global_batch(seq_len, gpus)
    assert got == batch
    assert 0.5 <= got * seq_len / 2**22 <= 1.5


def test_outputs_say_which_inputs_were_defaulted(capsys, tmp_path):
    argv = ["--model", "small", "--seq-len", "4096", "--cluster", "dgx-h100:16", "--tp", "8", "--pp", "1",
            "--microbatch-size", "4", "--zero", "1", "--recompute", "none", "--workers", "1", "--no-report"]
    code, out, _ = run(capsys, *argv, "--out", str(tmp_path / "a"))
    assert code == 0
    first = out.splitlines()[0]
    assert "[default: 20 per parameter, Chinchilla]" in first and "[default: ~4M tokens per step]" in first
    assert "global batch 1024 sequences = 4.19M tokens" in first
    code, printed, _ = run(capsys, *argv, "--json", "--out", str(tmp_path / "b"))
    inputs = json.loads(printed)["inputs"]
    params = get_model("small").num_params()
    assert inputs["defaulted"] == ["tokens", "global_batch"]
    assert inputs["tokens"] == float(f"{20 * params:.3g}") and inputs["global_batch"] == 1024
    row = json.loads((tmp_path / "b" / "results.json").read_text())["rows"][0]
    assert row["time_to_train_days"] * 86400 * row["tokens_per_s"] == pytest.approx(inputs["tokens"], rel=1e-6)
    code, out, _ = run(capsys, *argv, "--tokens", "1e9", "--global-batch", "64", "--out", str(tmp_path / "c"))
    assert code == 0 and "default" not in out.splitlines()[0]


def test_the_engine_rechecks_each_designs_fastest_plan_first():
    def row(design, days):
        return {"id": f"{design}/{days}", "design": design, "gpus": 8, "time_to_train_days": days,
                "cost_usd": days, "peak_memory_gib": 1.0, "usable_hbm_gib": 2.0}

    rows = [row("a100", 5), row("h100", 2), row("h100", 1), row("a100", 6), row("h100", 3)]
    assert [r["id"] for r in to_verify(rows, 3)] == ["h100/1", "a100/5", "h100/2"]
    assert [r["id"] for r in to_verify(rows, 1)] == ["h100/1"]


# ---- the Pareto plot says how many plans it shows ----

@pytest.mark.parametrize(("timed", "skipped", "says"), [
    (19, 1_183, "timed plans (19 of 1,202 that fit)"),  # the README's sweep: the bound skipped the rest
    (1_202, 0, "every plan that fits (1,202)"),  # --all-plans
])
def test_pareto_title_counts_the_plans_it_shows(timed, skipped, says):
    from types import SimpleNamespace

    from sim.explore.pruning import BOUND_REASON
    from sim.explore.report import _title
    from sim.explore.sweep import SweepPlan

    plan = SweepPlan(model=get_model("small"), pruned={"dgx-h100/512": {BOUND_REASON: skipped, "memory": 50}})
    spec = SimpleNamespace(model="small", tokens=1e12, global_batch=512)
    title = _title(SimpleNamespace(spec=spec, plan=plan, rows=[{}] * timed))
    assert title.endswith(says) and "every plan" not in title.replace(says, "")
