"""Torch's runtime: FSDP2's fp32 state split and gradients freed by zero_grad(set_to_none=True).

Closed forms: FSDP2 keeps fp32 sharded parameters (4 bytes), fp32 sharded gradients (4) and
AdamW's two fp32 moments (8) per parameter over N ranks (16/N, the ZeRO paper's stage-3 total);
torch.optim's zero_grad(set_to_none=True) at the step's start leaves no gradient until the
backward makes them; Megatron's gradient buffer is persistent.
"""

from __future__ import annotations

import numpy as np
import pytest

from schedules.memory import fsdp_state_bytes, model_state_bytes
from sim.job import resolve_job
from sim.memory import MemoryModel
from sim.simulate import simulate

GPT = dict(layers=4, hidden=256, heads=8, vocab=1000, seq_len=512, cluster="dgx-h100", nodes=1, gpus_per_node=4,
           tp=1, pp=1, global_batch=8, ideal_network=True)


@pytest.mark.parametrize("n", [1, 8, 128])
def test_fsdp_split_is_4_4_8_bytes_per_parameter(n):
    psi = 8.03e9
    s = fsdp_state_bytes(psi, n)
    assert (s.params, s.grads, s.optimizer) == pytest.approx((4 * psi / n, 4 * psi / n, 8 * psi / n))
    assert s.total == pytest.approx(model_state_bytes(psi, 3, n).total)


def _first_backward_s(result, rank):
    spans = result.timeline.spans
    mine = spans[(spans["rank"] == rank) & spans["kind"].astype(str).isin(["bwd", "bwd_input", "bwd_weight"])]
    return float(mine["start_s"].min())


def test_torch_gradients_exist_from_the_first_backward_only():
    result = simulate(resolve_job({**GPT, "framework": "torch", "zero": 3}))
    mm = MemoryModel(result.job.model, result.job.plan, result.schedule)
    for rank, mt in result.memory_timelines.items():
        states, _ = mm.state_bytes(result.timeline.meta.rank_pp[rank])
        assert states.grads == pytest.approx(states.params) and states.optimizer == pytest.approx(2 * states.params)
        t0 = _first_backward_s(result, rank)
        grads = mt.bytes["grads"]
        before, after = mt.times_s < t0, (mt.times_s >= t0) & (np.arange(mt.times_s.size) < mt.times_s.size - 1)
        assert before.any() and after.any()
        assert np.all(grads[before] == 0.0)
        assert np.allclose(grads[after], states.grads)


def test_zero_grad_frees_them_at_the_next_step_start():
    result = simulate(resolve_job({**GPT, "framework": "torch", "zero": 3, "steps": 2}))
    spans = result.timeline.spans
    mt = result.memory_timelines[0]
    step1 = float(spans[(spans["rank"] == 0) & (spans["step"] == 1)]["start_s"].min())
    bwd1 = float(spans[(spans["rank"] == 0) & (spans["step"] == 1)
                       & spans["kind"].astype(str).isin(["bwd", "bwd_input"])]["start_s"].min())
    i0 = int(np.searchsorted(mt.times_s, step1))
    assert mt.times_s[i0] == pytest.approx(step1) and mt.bytes["grads"][i0] == 0.0
    assert mt.bytes["grads"][i0 - 1] > 0.0
    i1 = int(np.searchsorted(mt.times_s, bwd1))
    assert mt.bytes["grads"][i1] > 0.0 and np.all(mt.bytes["grads"][i0:i1] == 0.0)


def test_megatron_gradient_buffer_is_held_all_step():
    result = simulate(resolve_job({**GPT, "zero": 1}))
    mt = result.memory_timelines[0]
    assert np.all(mt.bytes["grads"][:-1] == mt.bytes["grads"][0]) and mt.bytes["grads"][0] > 0
