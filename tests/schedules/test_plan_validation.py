"""Invalid plans are rejected with one-line messages naming the field."""

import pytest

from schedules.model_presets import get_model
from schedules.plan import ParallelPlan, check_plan, stage_layers


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pp": 5, "global_batch": 8}, "pp"),                      # 32 layers not divisible by 5
    ({"tp": 3, "global_batch": 8}, "tp"),                      # 32 heads not divisible by 3
    ({"dp": 3, "global_batch": 8}, "global_batch"),            # 8 not divisible by dp*mbs
    ({"vpp": 2, "pp": 2, "global_batch": 8}, "vpp"),           # vpp needs an interleaved schedule
    ({"schedule": "interleaved", "pp": 2, "global_batch": 8}, "vpp"),
    ({"zero": 4}, "zero"),
    ({"recompute": "some"}, "recompute"),
    ({"schedule": "2f2b"}, "schedule"),
    ({"tp": 0}, "tp"),
    ({"placement": ("tp", "dp")}, "placement"),
    # blocking P2P of a multi-chunk schedule Megatron does not run blocking (it would deadlock); its
    # interleaved 1F1B runs in lock-step (tests/schedules/test_pipeline_lockstep.py)
    ({"schedule": "zbv", "vpp": 2, "pp": 2, "global_batch": 8, "pipeline_p2p": "blocking"}, "pipeline_p2p"),
    ({"schedule": "interleaved-zb", "vpp": 2, "pp": 2, "global_batch": 8, "pipeline_p2p": "blocking"}, "pipeline_p2p"),
    # the field at fault is named: activation offload on the torch runtime (was reported as offload='none')
    ({"framework": "torch", "dp": 2, "global_batch": 8, "offload_activations": True}, "offload_activations"),
    ({"framework": "torch", "dp": 2, "global_batch": 8, "zero": 1, "offload": "optimizer"}, "offload"),
])
def test_invalid_plans_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}=") as err:
        check_plan(get_model("llama3-8b"), ParallelPlan(**kwargs))
    assert "\n" not in str(err.value)


def test_uneven_stages_follow_llama3_split():
    # Llama 3 405B: 126 layers on 16 stages, one layer fewer on the first and the last stage.
    plan = ParallelPlan(pp=16, global_batch=16, uneven_stages=True)
    counts = stage_layers(get_model("llama3-405b"), plan)
    assert counts == [7] + [8] * 14 + [7]
    assert sum(counts) == 126


def test_microbatches():
    plan = ParallelPlan(dp=4, microbatch_size=2, global_batch=64)
    assert plan.num_microbatches == 8 and plan.world_size == 4
