"""The schedule playground: an abstract pipeline with unit costs, no model and no network.

It runs the same builder and engine as ``simulate``: only the work is fixed times
(:class:`schedules.work.UnitWork`) instead of a model's FLOPs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from schedules.actions import PipelineSchedule
from schedules.builder import BuildOptions, build_task_graph
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.work import UnitWork
from sim.bubble import WITH_CLOSED_FORM, ClosedForm, closed_form_bubble
from sim.costing import cost_fixed
from sim.engine import Engine
from sim.metrics import StepMetrics, step_metrics
from sim.summary import round_sig
from sim.timeline import Timeline


@dataclass(frozen=True, kw_only=True)
class UnitCosts:
    """Per pipeline rank: forward, full backward, and the weight-gradient part of backward (s)."""

    forward_s: float = 1.0
    backward_s: float = 2.0
    backward_weight_s: float = 1.0
    p2p_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("forward_s", "backward_s", "backward_weight_s", "p2p_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid: expected a time >= 0")
        if self.backward_weight_s > self.backward_s:
            raise ValueError(f"backward_weight_s={self.backward_weight_s!r} is invalid: "
                             f"must not exceed backward_s={self.backward_s!r}")


@dataclass(frozen=True)
class PlaygroundResult:
    """The simulated timeline of the abstract pipeline and its metrics."""

    schedule: PipelineSchedule
    costs: UnitCosts
    timeline: Timeline
    metrics: StepMetrics

    @property
    def closed_form(self) -> ClosedForm | None:
        """The bubble fraction by formula, where the schedule has one for these costs."""
        c = self.costs
        return closed_form_bubble(self.schedule, c.forward_s, c.backward_s, c.backward_weight_s, c.p2p_s)

    def summary(self) -> dict[str, object]:
        """Schedule, step time (units of --fwd/--bwd) and bubble, measured and by formula."""
        form = self.closed_form
        return {"schedule": self.schedule.name, "pp": self.schedule.pp, "microbatches": self.schedule.microbatches,
                "vpp": self.schedule.vpp, "step_time": round_sig(self.metrics.step_time_s),
                "bubble_fraction": round_sig(self.metrics.bubble_fraction),
                "bubble_closed_form": None if form is None else round_sig(float(form.value)),
                "bubble_formula": None if form is None else form.formula}


def run_playground(schedule: PipelineSchedule, costs: UnitCosts) -> PlaygroundResult:
    """Simulate one step of ``schedule`` with ``costs`` on pp ranks (rank = pipeline rank)."""
    stages = schedule.pp * schedule.vpp
    model = ModelSpec(name="abstract", num_layers=stages, hidden_size=8, num_heads=1, vocab_size=8, seq_len=8)
    plan = ParallelPlan(pp=schedule.pp, vpp=schedule.vpp, global_batch=schedule.microbatches,
                        schedule=schedule.name)
    work = UnitWork(costs.forward_s, costs.backward_s, costs.backward_weight_s, schedule.vpp,
                    schedule.split_backward, costs.p2p_s)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp, BuildOptions(), work)
    result = Engine(graph, cost_fixed(graph)).run(detail="op", meta=dataclasses.replace(graph.meta, playground=True))
    return PlaygroundResult(schedule, costs, result.timeline, step_metrics(result.timeline))


def bubble_row(result: PlaygroundResult) -> dict[str, object]:
    """The terminal's and the report's row: step time, bubble measured and by closed form."""
    return {"schedule": result.schedule.name, "vpp": result.schedule.vpp,
            "step_time": float(f"{result.metrics.step_time_s:.6g}"), "bubble": f"{result.metrics.bubble_fraction:.4f}",
            "closed_form": closed_form_text(result)}


def closed_form_text(result: PlaygroundResult) -> str:
    """"(p−1)/(m+p−1) = 3/11 = 0.2727", or why there is none."""
    form = result.closed_form
    if form is not None:
        return form.describe()
    return "none for these costs" if result.schedule.name in WITH_CLOSED_FORM else "none known"
