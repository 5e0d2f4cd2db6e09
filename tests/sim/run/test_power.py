"""Node power of an 8 x H100 node training a 13B Llama 2 against published measurements.

Latif et al. arXiv 2412.08602: highest draw 8.48 kW (8.4 kW in the abstract) training Llama2-13b
on one 8 x H100 HGX node. The peak is nearly circular here (the node baseline is derived from it
with the GPUs at their 700 W cap); the mean is not: Newkirk et al. arXiv 2506.14551, on the same
Brookhaven measurements, find compute-intensive training at "76% of the 10.2 kW" rating (7.75 kW).
The plan of the measured run is not known: FSDP over 8 GPUs and TP8 are both checked.
"""

import pytest

from sim.job import DEFAULT_JOB, resolve_job
from sim.run.energy import step_energy_j, step_wave
from sim.run.power import H100, H100_NODE_PEAK_W, H100_NODE_RATED_W, power_profile
from sim.simulate import simulate

LLAMA2_13B = {"layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "ffn_hidden": 13824, "vocab": 32000,
              "seq_len": 4096, "ffn_kind": "swiglu"}  # Touvron et al. 2023, Table 1 / the released config
MEASURED_MEAN_W = 0.76 * H100_NODE_RATED_W


@pytest.mark.parametrize("plan", [{"tp": 1, "pp": 1, "zero": 3, "framework": "torch", "microbatch_size": 2,
                                   "microbatches": 4}, {"tp": 8, "pp": 1, "microbatches": 8}])
def test_node_power_within_15_percent_of_measurement(plan):
    job = resolve_job({**LLAMA2_13B, "cluster": "dgx-h100", "nodes": 1, **plan}, defaults=DEFAULT_JOB)
    result = simulate(job)
    wave = step_wave(result.timeline, H100)
    node = wave.node_w(H100, 8)
    mean = 8 * wave.mean_gpu_w() + H100.node_baseline_w
    assert float(node.max()) == pytest.approx(H100_NODE_PEAK_W, rel=0.15)
    assert mean == pytest.approx(MEASURED_MEAN_W, rel=0.15)
    assert float(node.min()) < mean < float(node.max()) <= H100_NODE_RATED_W  # a waveform, under the rating
    joules = step_energy_j(wave, H100, step_s=result.metrics.step_time_s, world=8, gpus_per_node=8)
    assert joules == pytest.approx(mean * result.metrics.step_time_s)
    assert joules < 8 * H100.tdp_w * result.metrics.step_time_s + 8 * H100_NODE_RATED_W  # below TDP bound + node


def test_profiles_by_device_family():
    assert power_profile("h100-sxm") is H100 and power_profile("h100-sxm-hbm2e") is H100
    assert power_profile("mi300x") is None
    assert H100.idle_w < H100.comm_w < H100.memory_w < H100.gemm_w == H100.tdp_w == 700
