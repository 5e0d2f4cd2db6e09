"""explore --reliability: failures reorder plans (a larger, faster cluster loses to a smaller one
once its interruption rate, twice as high, is counted), and the CLI shows P10/P90."""

import json
from types import SimpleNamespace

import pytest

from schedules.model_presets import get_model
from sim.cli.main import main
from sim.explore.failures import with_failures
from sim.explore.rank import TIME, ranked
from sim.run.inputs import ClassRate, FailureClass, ReliabilityInputs, RestartCost

TOKENS = 1e12


def _row(plan_id: str, gpus: int, step_s: float) -> dict:
    model = get_model("llama3-8b")
    batch = 1024
    days = TOKENS / (batch * model.seq_len / step_s) / 86400
    return {"id": plan_id, "design": "dgx-h100", "gpus": gpus, "tp": 8, "cp": 1, "pp": 1, "dp": gpus // 8, "ep": 1,
            "vpp": 1, "schedule": "1f1b", "microbatch_size": 1, "num_microbatches": batch // (gpus // 8), "zero": 1,
            "sequence_parallel": True, "recompute": "none", "dtype": "bf16", "step_time_s": step_s,
            "time_to_train_days": days, "cost_usd": days * 24 * gpus * 2.99, "price_per_gpu_hour_usd": 2.99,
            "memory_params_gib": 2.0, "memory_optimizer_gib": 1.0, "peak_memory_gib": 40.0, "usable_hbm_gib": 70.0}


def test_failures_reorder_plans():
    spec = SimpleNamespace(tokens=TOKENS, price_of=lambda design: None)
    rows = [_row("big", 8192, 0.75), _row("small", 4096, 1.0)]  # big: 1.33x faster on 2x the GPUs
    assert [r["id"] for r in ranked(rows)] == ["big", "small"]
    harsh = ReliabilityInputs(name="harsh", classes=(ClassRate(cls=FailureClass.GPU, per_1000_node_days=60.0),),
                              restart=RestartCost(init_s=3600.0))
    aware = with_failures(rows, spec, get_model("llama3-8b"), harsh)
    assert [r["id"] for r in ranked(aware)] == ["small", "big"]
    big = next(r for r in aware if r["id"] == "big")
    assert big["ettr"] < 0.5 and big[TIME] > big["failure_free_days"]
    assert big["days_p10"] <= big[TIME] * 1.05 and big["days_p90"] >= big[TIME] * 0.95


@pytest.mark.slow
def test_explore_cli_shows_failure_columns(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["explore", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64,128", "--tokens", "1e11",
                 "--out", "ex", "--no-report", "--json", "--reliability", "llama3-405b", "--top", "1"])
    out = capsys.readouterr().out
    assert code == 0
    obj = json.loads(out)
    assert "llama3-405b" in obj["failures"]
    for row in obj["best"]:
        assert row["p10_days"] <= row["days"] * 1.01 and row["ettr"] < 1 and row["days"] > row["free_days"]
    scaling = obj["failure_scaling"]
    assert [r["gpus"] for r in scaling] == [64, 128] and scaling[1]["speedup_vs_prev"] < 2.0


def test_failure_aware_scaling_table_and_figure():
    """Doubling the GPUs at a fixed step speed-up buys less than the GPU ratio once failures
    (their rate doubling with the nodes) are counted; the figure draws both curves."""
    from sim.explore.failure_figure import scaling_figure
    from sim.explore.failure_scaling import is_failure_aware, scaling_table

    spec = SimpleNamespace(tokens=TOKENS, price_of=lambda design: None)
    rows = [_row("a", 2048, 2.0), _row("b", 4096, 1.0), _row("c", 8192, 0.5), _row("c2", 8192, 0.6)]
    harsh = ReliabilityInputs(name="harsh", classes=(ClassRate(cls=FailureClass.GPU, per_1000_node_days=20.0),),
                              restart=RestartCost(init_s=1800.0))
    assert not is_failure_aware(rows)
    aware = with_failures(rows, spec, get_model("llama3-8b"), harsh)
    assert is_failure_aware(aware)
    table = scaling_table(aware)
    assert [t["gpus"] for t in table] == [2048, 4096, 8192] and table[-1]["plan"]  # the best of each size
    assert table[0]["speedup_vs_prev"] is None
    for t in table[1:]:
        assert t["gpus_ratio"] == 2.0 and 1.0 < t["speedup_vs_prev"] < 2.0  # perfect step scaling, not in days
        assert t["days"] > t["free_days"] and t["cost"] > t["free_cost"]
    a100 = [{**r, "design": "dgx-a100", "id": r["id"] + "-a100", "time_to_train_days": 2 * r["time_to_train_days"]}
            for r in aware]
    assert [t["design"] for t in scaling_table(a100 + aware)][:3] == ["dgx-h100"] * 3  # the faster design first
    fig = scaling_figure(aware, "t")
    names = [tr.name for tr in fig.data]
    assert "dgx-h100: with failures" in names and "dgx-h100: failure-free" in names
    solid = fig.data[names.index("dgx-h100: with failures")]
    assert list(solid.y) == [t["days"] for t in table] and solid.error_y.array is not None
