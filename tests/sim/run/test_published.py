"""Published figures the run-level model must reproduce (issue 27's acceptance list).

Meta's ETTR figures for a 16k-GPU job on RSC-1 (arXiv 2410.21680, as quoted in issue 27): about
0.70 with hourly checkpoints, about 0.93 with 5-minute ones. Inputs: 6.50 failures per 1,000
node-days (the paper's RSC-1 rate), 2,048 8-GPU nodes, checkpoints costing nothing to take, and a
restart overhead u0 = 300 s that is RECALLED: the paper's ETTR section could not be read through
the tools here, so this test checks the model against the figures from that one recalled input.
"""

import pytest

from sim.run.ettr import FailureCosts, ettr, ettr_breakdown, mtti_s
from sim.run.presets import LLAMA3_UNEXPECTED, META_RESTART_S, get_reliability

NODES_16K = 16384 // 8
DAY = 86400.0


def test_meta_closed_form_figures_from_their_inputs():
    rate = get_reliability("meta-rsc1").interrupt_rate_s(NODES_16K)
    costs = FailureCosts(restart_s=META_RESTART_S)
    assert ettr(rate, 3600.0, 0.0, costs) == pytest.approx(0.70, abs=0.02)
    assert ettr(rate, 300.0, 0.0, costs) == pytest.approx(0.93, abs=0.02)


def test_meta_projected_mttf_at_16k_gpus():
    # 2410.21680: projected MTTF 1.8 h at 16k GPUs from the RSC-1 rate (transcribed in issue 27's sources)
    assert mtti_s(get_reliability("meta-rsc1").interrupt_rate_s(NODES_16K)) / 3600 == pytest.approx(1.8, abs=0.05)


def test_llama3_table5_sums_to_419():
    assert sum(LLAMA3_UNEXPECTED.values()) == 419
    rate = get_reliability("llama3-405b").interrupt_rate_s(NODES_16K)
    assert rate * 54 * DAY == pytest.approx(419)


def _interruptions_in_54_days(preset: str, interval_s: float, costs: FailureCosts) -> float:
    b = ettr_breakdown(get_reliability(preset).interrupt_rate_s(NODES_16K), interval_s, 5.0, costs)
    return b.interruptions_per_s * 54 * DAY


def test_research_cluster_rates_bracket_llama3_unexpected_interruptions():
    costs = FailureCosts(restart_s=300.0)
    low = _interruptions_in_54_days("meta-rsc2", 1800.0, costs)
    high = _interruptions_in_54_days("meta-rsc1", 1800.0, costs)
    assert low < 419 < high
    assert 200 < low and high < 800  # a bracket, not the whole number line


def test_stated_setting_reproduces_llama3_above_90_percent():
    # Stated setting: async checkpoints every 20 min blocking 5 s, restart 5 min, no repair wait.
    costs = FailureCosts(restart_s=300.0)
    for preset in ("llama3-405b", "meta-rsc1"):
        interval = 1200.0 if preset == "llama3-405b" else 300.0
        value = ettr(get_reliability(preset).interrupt_rate_s(NODES_16K), interval, 5.0, costs)
        assert 0.90 < value < 0.97
    hourly = ettr(get_reliability("llama3-405b").interrupt_rate_s(NODES_16K), 3600.0, 5.0, FailureCosts(restart_s=1800.0))
    assert hourly < 0.90  # slow restarts and hourly checkpoints would not have made it
