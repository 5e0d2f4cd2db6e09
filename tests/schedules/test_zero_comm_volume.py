"""ZeRO's communication volume per rank and step (Rajbhandari et al. 2020, section 7): plain DP
all-reduces the gradients (2Ψ); ZeRO-1/2 reduce-scatter them and all-gather the parameters
(Ψ + Ψ = 2Ψ, the same); ZeRO-3 gathers the parameters in forward and again in backward and
reduce-scatters the gradients (3Ψ, 1.5x DP). Ψ is the model's parameter bytes per TP rank; a
collective of nccl-tests size S on n ranks moves 2(n-1)/n·S per rank (all-reduce) or
(n-1)/n·S (all-gather, reduce-scatter)."""

from __future__ import annotations

import pytest

from core import groups
from schedules.builder import BuildOptions, build_task_graph
from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan

DP = 4
MOVED = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}  # x (n-1)/n x size


def _dp_volume(framework: str, zero: int) -> tuple[float, float]:
    """(bytes moved per rank in the DP collectives of one step, parameter bytes of the model)."""
    plan = ParallelPlan(framework=framework, dtype="fp32", dp=DP, zero=zero, global_batch=DP,
                        overlap_param_gather=False)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    model = get_model("tiny")
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: dp, BuildOptions(folded=False))
    moved = sum(MOVED[op.op_class] * (DP - 1) / DP * op.bytes
                for task in graph.tasks if task.rank == 0 and task.step == 0
                for op in task.ops if op.dim == groups.DP and op.op_class in MOVED)
    return moved, plan.element_bytes * model.num_params()


@pytest.mark.parametrize("framework", ["megatron", "torch"])
@pytest.mark.parametrize(("zero", "multiple"), [(0, 2.0), (3, 3.0)])
def test_dp_communication_volume_matches_zero_paper(framework: str, zero: int, multiple: float) -> None:
    moved, psi = _dp_volume(framework, zero)
    assert moved == pytest.approx(multiple * (DP - 1) / DP * psi, rel=1e-9)
