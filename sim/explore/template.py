"""One task graph for many plans: the builder's graph with the model's work left as slots.

Plans of a sweep that differ only in what each compute block computes — sequence parallelism,
recomputation, the attention kernel, the micro-batch size at an equal micro-batch count, the
cluster design — have the same graph: the same tasks, dependencies and collectives (the
data-parallel and pipeline rules do not read those fields; sequence parallelism only where it
decides Megatron-LM's scatter/gather of pipeline messages, which the key keeps).
:func:`graph_template` builds that graph once with a :class:`SlotWork`, which hands the builder a
placeholder op for each distinct piece of work it asks for (a block, a send, an optimizer step);
:meth:`Template.costs` prices a plan by pricing each distinct task once with the plan's own
work (:class:`schedules.work.ModelWork`) and gathering the prices per task with numpy.

The graph is the builder's (:func:`schedules.builder.build_task_graph`): no rule is restated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass, Runtime
from schedules.actions import Action, PipelineSchedule
from schedules.builder import BuildOptions, build_task_graph
from schedules.model import ModelSpec
from schedules.passes.ep_overlap import overlaps_all_to_alls
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo
from schedules.work import Work
from sim.costing import CostedTask
from sim.list_engine import GraphPasses
from sim.pricing import TaskCoster

SLOT = OpClass.SLOT
WORK_FIELDS = ("sequence_parallel", "recompute", "flash_attention")  # what only the work reads


class SlotWork:
    """A :class:`schedules.work.Work` that records what the builder asks for: each distinct
    request gets a slot number, returned as a one-op placeholder."""

    steps_optimizer = True  # the sweep's plans are priced with their ModelWork

    def __init__(self) -> None:
        self.requests: list[tuple[object, ...]] = []
        self._slots: dict[tuple[object, ...], tuple[Op, ...]] = {}

    def _slot(self, request: tuple[object, ...], lane: Lane = Lane.COMPUTE, name: str = "",
              key: tuple[object, ...] | None = None) -> tuple[Op, ...]:
        """The placeholder of ``request`` (looked up by ``key`` when given: a cheaper name for it)."""
        lookup = request if key is None else key
        found = self._slots.get(lookup)
        if found is None:
            found = self._slots[lookup] = (Op(lane, Kind.OTHER, name, SLOT, layer=len(self.requests)),)
            self.requests.append(request)
        return found

    def block_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                  last: bool) -> tuple[Op, ...]:
        # Keyed by the stage's identity (one object per stage in a build; hashing its fields is
        # what a build spent most of its slot lookups on); the request keeps the stage itself.
        return self._slot(("block_ops", stage, phase, layers, first, last),
                          key=("block_ops", id(stage), phase, layers, first, last))

    def send_op(self, action: Action, name: str) -> Op:
        return Op(Lane.PP, Kind.SEND, name, SLOT, layer=self._slot(("send",), Lane.PP)[0].layer)

    def recv_gather_ops(self) -> tuple[Op, ...]:
        return self._slot(("recv_gather_ops",), Lane.TP)

    def optimizer_ops(self, params_local: float, buffer_params: float) -> tuple[Op, ...]:
        return self._slot(("optimizer_ops", params_local, buffer_params))

    def grad_accumulate_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                            last: bool, stored: bool) -> tuple[Op, ...]:
        return self._slot(("grad_accumulate_ops", stage, phase, layers, first, last, stored))


@dataclass(frozen=True)
class Template:
    """A graph whose compute work is slots: per task its cost class (tasks of one class cost the
    same) and one task of each class to price; ``derived`` holds what callers compute once per
    template."""

    graph: TaskGraph
    passes: GraphPasses
    requests: tuple[tuple[object, ...], ...]
    cost_class: np.ndarray
    representative: tuple[Task, ...]
    derived: dict[str, object] = dataclasses.field(default_factory=dict)  # callers' per-template memos

    def costs(self, work: Work, coster: TaskCoster) -> list[CostedTask]:
        """The cost of every class for a plan whose work is ``work``."""
        out = []
        for task in self.representative:
            real = self.real(task, work)
            out.append(coster.cost_task(task) if real is task else coster.layout(real))
        return out

    def real(self, task: Task, work: Work) -> Task:
        """``task`` with its placeholders replaced by ``work``'s ops."""
        if not any(op.op_class == SLOT for op in task.ops):
            return task
        ops: list[Op] = []
        for op in task.ops:
            if op.op_class != SLOT:
                ops.append(op)
                continue
            kind, *args = self.requests[op.layer]
            if kind == Kind.SEND:  # a send's op, or a receive's (its kind kept)
                sent = work.send_op(Action(stage=0, phase="F", microbatch=0), op.name)
                ops.append(dataclasses.replace(sent, kind=op.kind) if op.kind == Kind.RECV else sent)
            else:
                ops.extend(getattr(work, str(kind))(*args))
        return dataclasses.replace(task, ops=tuple(ops))


def template_key(model: ModelSpec, plan: ParallelPlan) -> Hashable | None:
    """Plans with equal keys share a template; None: the plan needs its own graph (the included
    trainer's runtime, activation offload, whose copies depend on the work, overlapped MoE
    all-to-alls, which the overlap pass takes out of the work's blocks, or DeepSpeed 2021's ZeRO-3,
    whose hooks are woven into the work's blocks)."""
    if plan.framework != Runtime.MEGATRON or plan.offload_activations or overlaps_all_to_alls(model, plan) \
            or plan.per_param_zero3:
        return None
    shared = dataclasses.replace(plan, **{f: getattr(ParallelPlan, f) for f in WORK_FIELDS})
    # The micro-batch size reaches the graph only through the work (block, send and memory sizes):
    # plans of one micro-batch count share a graph whatever their size. Sequence parallelism does
    # reach it where it decides Megatron-LM's scatter/gather (a TP all-gather after each receive).
    return (model, dataclasses.replace(shared, microbatch_size=1, global_batch=plan.num_microbatches * plan.dp),
            plan.scatter_gather_p2p)


def graph_template(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
                   rank_of: Callable[[int, int, int, int], int], work: Work | None = None,
                   single_queue: bool = False) -> Template:
    """The folded one-step graph of ``plan`` with its work as slots (or, given ``work``, the
    plan's own graph: a template that only this plan uses); ``single_queue``: one hardware
    queue per GPU (``TaskGraph.single_queue``)."""
    slots = SlotWork() if work is None else None
    graph = build_task_graph(model, plan, schedule, rank_of, BuildOptions(folded=True, steps=1, single_queue=single_queue),
                             work=work or slots)
    cost_class, representative = _cost_classes(graph.tasks)
    requests = tuple(slots.requests) if slots is not None else ()
    return Template(graph, GraphPasses(graph), requests, cost_class, representative)


def _cost_classes(tasks: tuple[Task, ...]) -> tuple[np.ndarray, tuple[Task, ...]]:
    """Each task's cost class (tasks of one class cost the same: the same rank, peer and lane,
    and ops whose priced fields are equal) and the first task of each class."""
    classes: dict[tuple[object, ...], int] = {}
    representative: list[Task] = []
    cost_class = np.empty(len(tasks), np.int64)
    works: dict[int, int] = {}  # id of an ops tuple -> its number (tasks share ops tuples)
    numbers: dict[tuple[object, ...], int] = {}  # the priced fields of an ops tuple -> its number
    for i, t in enumerate(tasks):
        number = works.get(id(t.ops))
        if number is None:
            priced = tuple((op.op_class, op.layer, op.bytes, op.flops, op.dim, op.duration_s, op.lane, op.concurrent)
                           for op in t.ops)
            number = works[id(t.ops)] = numbers.setdefault(priced, len(numbers))
        key = (t.rank, t.peer, t.lane, number)
        c = classes.get(key)
        if c is None:
            c = classes[key] = len(representative)
            representative.append(t)
        cost_class[i] = c
    return cost_class, tuple(representative)


class TemplateCache:
    """The templates of recent plans (oldest dropped past ``size``)."""

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self._items: dict[Hashable, Template] = {}

    def get(self, model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
            rank_of: Callable[[int, int, int, int], int], work: Work, single_queue: bool = False) -> Template:
        """``plan``'s template (made on first use; the plan's own graph when it cannot share one)."""
        key = template_key(model, plan)
        if key is None:
            return graph_template(model, plan, schedule, rank_of, work, single_queue)
        found = self._items.get((key, single_queue))
        if found is None:
            if len(self._items) >= self.size:
                del self._items[next(iter(self._items))]
            found = self._items[(key, single_queue)] = graph_template(model, plan, schedule, rank_of,
                                                                      single_queue=single_queue)
        return found
