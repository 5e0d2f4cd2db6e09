"""FSDP units that do not reshard after forward keep their gathered parameters in HBM until their
backward (FSDP2 ``FSDPState._lazy_init``: the root; torchtitan ``apply_fsdp`` @9dec370: the last
block too, without PP): the memory timeline holds those gathers to the unit's last compute span."""

from __future__ import annotations

import pytest

from schedules.pipeline import build_schedule
from sim.job import resolve_job
from sim.memory import MemoryModel
from sim.memory_timeline import _comm_buffers, _kept_units
from sim.simulate import simulate

LAYERS = 4


def _job(mode: str):
    return resolve_job({"layers": LAYERS, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 1024,
                        "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 1, "dp": 8, "global_batch": 16,
                        "zero": 3, "framework_preset": "torchtitan", "fsdp_reshard_after_forward": mode})


@pytest.mark.parametrize(("mode", "kept"), [("all", set()), ("non-root", {-1}), ("torchtitan", {-1, LAYERS - 1})])
def test_which_units_stay_gathered(mode: str, kept: set[int]) -> None:
    plan = _job(mode).plan
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    assert set(_kept_units(MemoryModel(_job(mode).model, plan, schedule))) == kept


def test_a_kept_units_gather_is_held_to_its_last_compute_span() -> None:
    result = simulate(_job("torchtitan"))
    spans = result.timeline.spans
    buffers = _comm_buffers(result.timeline, by_rank=False, kept=frozenset({-1, LAYERS - 1}))
    comm = spans[spans["lane"].astype(str).str.startswith("comm") & (spans["bytes"] > 0)]
    assert len(comm) == len(buffers.free)  # Timeline order, one buffer per communication span
    first = spans["step"].min()
    compute = spans[(spans["lane"].astype(str) == "compute") & (spans["rank"] == 0) & (spans["step"] == first)
                    & (spans["microbatch"] == 0)]
    is_gather = (comm["kind"].astype(str) == "all_gather") & (comm["rank"] == 0) & (comm["step"] == first) \
        & (comm["microbatch"] == 0)
    for layer in (-1, LAYERS - 1):
        i = list(comm.index).index(comm[is_gather & (comm["layer"] == layer)].index[0])
        uses = compute if layer < 0 else compute[compute["layer"] == layer]
        assert buffers.free[i] == pytest.approx(uses["end_s"].max())
    # a block that reshards frees its forward gather with the forward block, long before its backward
    i = list(comm.index).index(comm[is_gather & (comm["layer"] == 0)].index[0])
    assert buffers.free[i] < compute[compute["layer"] == 0]["end_s"].max()
