"""FSDP2's end-of-backward waits and the routed experts' own FSDP unit on the torch runtime
(schedules.passes.dp_torch), checked against what the FSDP2 source does:

- ``_root_post_backward_final_callback`` (torch/distributed/fsdp/_fully_shard/_fsdp_state.py in
  torch 2.13; ``finalize_backward`` -> ``_wait_for_post_backward`` in 2.6-2.9) makes the compute
  stream wait for the reductions of the last backward, so no later compute overlaps them;
- the experts unit (``fully_shard(block.mlp.experts, mesh=ep_shard_mesh)``: NeMo AutoModel's
  parallelizer.py @ 01926a5c; the included trainer's experts unit over dp / ep ranks) is
  all-gathered like any FSDP unit: ZeRO-2 once per step, ZeRO-3 before every forward and backward.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from schedules.moe import is_moe_layer
from sim.job import Job, resolve_job
from sim.simulate import build_priced, simulate

MOE: dict[str, Any] = {"model": "mixtral-8x7b", "cluster": "dgx-h100", "nodes": 2, "tp": 1, "pp": 2, "dp": 8,
                       "ep": 4, "zero": 2, "framework": "torch", "global_batch": 32, "layers": 4,
                       "schedule": "interleaved", "vpp": 2, "sequence_parallel": True}
EPS = 1e-12


def _overlap(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[str, str]]:
    """Pairs (a's name, b's name) of spans that overlap in time by more than EPS."""
    out = []
    for ra in a.itertuples():
        hit = b[(b.start_s < ra.end_s - EPS) & (b.end_s > ra.start_s + EPS)]
        out += [(ra.name, rb) for rb in hit.name]
    return out


def test_no_compute_runs_beside_a_pipeline_stages_gradient_reduction() -> None:
    """Under torch pipelining a stage reduces after its last backward (REDUCE_GRAD): each unit's
    post-backward copy waits for the previous unit's reduction, and the final callback makes the
    compute stream wait for the last ones, so on every rank the gradient reductions (the
    experts' over EDP too) never run beside compute; the interleaved cool-down's next chunk
    waits."""
    spans = simulate(resolve_job(MOE)).timeline.spans
    for rank in (0, 8):
        s = spans[spans["rank"] == rank]
        reductions = s[s["name"].str.contains("grad_rs")]
        assert reductions["name"].str.startswith("expert_grad_rs").any()
        assert not _overlap(reductions, s[s["lane"] == "compute"])


def test_without_pp_the_next_micro_batch_waits_for_the_last_reductions() -> None:
    """Without PP (FSDP's hooks reduce each block as its backward ends, every micro-batch's
    backward being a last backward), a micro-batch's forward starts only after every reduction
    of the backward before it has ended."""
    job = resolve_job({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 1, "dp": 8,
                       "zero": 3, "framework": "torch", "global_batch": 16, "layers": 4,
                       "overlap_grad_reduce": True})
    assert job.plan.num_microbatches == 2
    s = simulate(job).timeline.spans
    s = s[s["rank"] == 0]
    reductions = s[s["name"].str.endswith("grad_rs") & (s["microbatch"] == 0)]
    second_forward = s[(s["lane"] == "compute") & (s["microbatch"] == 1) & (s["kind"] == "fwd")]
    assert len(reductions) == 5 and len(second_forward)  # 4 blocks and the root
    assert second_forward["start_s"].min() >= reductions["end_s"].max() - EPS


def _expert_gathers(job: Job) -> tuple[list[tuple[int, float]], list[int]]:
    """(layer, bytes) of rank 0's experts all-gathers in one step, and the MoE layers it computes."""
    graph = build_priced(job).graph
    mine = [t for t in graph.tasks if t.rank == 0 and t.step == 0]
    gathers = [(t.layer, op.bytes) for t in mine for op in t.ops if op.name.endswith("experts.param_ag")]
    layers = sorted({t.layer for t in mine if t.lane == "compute" and t.layer >= 0
                     and is_moe_layer(job.model, t.layer)})
    return gathers, layers


def test_experts_are_gathered_over_their_expert_data_parallel_group() -> None:
    """8 DP ranks / EP 4 = 2 copies of each expert: ZeRO-2 gathers each of the rank's MoE layers'
    experts once per step (kept gathered until REDUCE_GRAD), ZeRO-3 before each of its forwards
    and backwards; the bytes are the rank's experts of the layer (2 of Mixtral's 8, 3 x 4096 x
    14336 each) in bf16; with EP = DP nothing is sharded and nothing gathered."""
    job = resolve_job(MOE)
    zero2, layers = _expert_gathers(job)
    assert layers == [0, 2]  # PP 2 x VP 2 over 4 layers: rank 0 holds virtual stages 0 and 2
    assert sorted(layer for layer, _ in zero2) == layers
    assert all(b == pytest.approx(2 * (2 * 3 * 4096 * 14336)) for _, b in zero2)
    zero3_job = resolve_job({**MOE, "zero": 3})
    zero3, _ = _expert_gathers(zero3_job)
    graph = build_priced(zero3_job).graph
    block_gathers = [t.layer for t in graph.tasks if t.rank == 0 and t.step == 0 for op in t.ops
                     if op.name == f"L{t.layer}.param_ag"]
    # the same FSDP2 reshard rules as the block's own unit: resharded after every forward, kept
    # after a backward that is not the stage's last (pipelining), so gathered as often
    assert len(zero3) == len(block_gathers) > len(zero2)
    assert _expert_gathers(resolve_job({**MOE, "ep": 8}))[0] == []


def test_without_pp_experts_are_gathered_again_after_each_backward() -> None:
    """FSDP's hooks reshard every unit after each backward (reshard_after_backward, the default),
    the experts' too, so ZeRO-2 gathers each MoE layer's experts once per micro-batch."""
    job = resolve_job({**MOE, "pp": 1, "nodes": 1, "global_batch": 16, "layers": 2, "vpp": 1,
                       "schedule": "1f1b", "overlap_grad_reduce": True})
    gathers, layers = _expert_gathers(job)
    assert job.plan.num_microbatches == 2 and layers == [0, 1]
    assert sorted(layer for layer, _ in gathers) == [0, 0, 1, 1]
