"""Turn (model, plan, pipeline schedule) into a TaskGraph.

For each simulated rank and step, the rank's pipeline actions become compute tasks (in the
schedule's order, so the compute stream runs them in that order); pipeline sends link the stages;
data-parallel gradient reduction, ZeRO parameter gathering and the optimizer step follow
:mod:`schedules.dp_tasks`.

Folding (the default): ranks that do identical work — TP peers, CP peers and DP replicas on a
uniform cluster — are simulated once, so the graph has one rank per pipeline rank and collective
tasks carry no rendezvous; the simulator prices them for the full group. ``folded=False`` builds
every rank, with collectives that start when all members are ready.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from schedules.actions import Action, PipelineSchedule
from schedules.dp_tasks import DataParallelTasks
from schedules.dp_torch import TorchDataParallelTasks
from schedules.flops import model_flops_per_step
from schedules.model import ModelSpec
from schedules.offload import ActivationOffload
from schedules.p2p_torch import TorchPipeline
from schedules.plan import ParallelPlan, check_plan
from schedules.stages import StageInfo, plan_stages
from schedules.taskgraph import Op, Task, TaskGraph
from schedules.work import ModelWork, Work

RankOf = Callable[[int, int, int, int], int]
"""(tp, cp, dp, pp) coordinates -> global rank."""


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How to build: ``folded`` simulates one rank per pipeline rank; ``steps`` training steps;
    ``gloo_host``: the ranks are CPU processes whose collectives run on gloo: a call blocks the
    thread that issues it until it is done (for calls without ``async_op``; NCCL returns at once
    and runs them on a stream), which matters where the trainer overlaps by issuing early
    (FSDP2's backward prefetch), and a reduce-scatter is an all-reduce on a new copy of the
    input, whose pages are touched for the first time (:mod:`schedules.dp_torch`)."""

    folded: bool = True
    steps: int = 1
    gloo_host: bool = False


@dataclass(frozen=True, slots=True)
class Coords:
    """A rank's position in the (tp, cp, dp, pp) grid."""

    tp: int
    cp: int
    dp: int
    pp: int


class TaskGraphBuilder:
    """Builds the task graph of one job; dependencies across ranks are resolved by key at the end."""

    def __init__(self, model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
                 rank_of: RankOf, options: BuildOptions, work: Work | None = None) -> None:
        check_plan(model, plan)
        self.model, self.plan, self.schedule, self.options = model, plan, schedule, options
        self.rank_of = rank_of
        self.stages: list[StageInfo] = plan_stages(model, plan)
        self.graph = TaskGraph()
        self.keys: dict[Hashable, int] = {}
        self.pending: list[tuple[int, Hashable]] = []
        self.split = schedule.split_backward
        self.work: Work = work or ModelWork(model, plan, self.split)
        torch = plan.framework == "torch"
        self.last_compute: dict[int, int] = {}  # rank -> its latest compute task
        self.grad_passes: set[tuple[int, int, int, str]] = set()  # (rank, step, stage, phase) seen
        self.dp = TorchDataParallelTasks(self) if torch else DataParallelTasks(self)
        self.p2p = TorchPipeline(self) if torch else None
        self.act_offload = ActivationOffload(self) if plan.offload_activations else None

    # ---- public entry ----
    def build(self) -> TaskGraph:
        """Emit every rank's tasks for every step, then resolve cross-rank dependencies."""
        for coords in self._ranks():
            prev_step_end = -1
            for step in range(self.options.steps):
                prev_step_end = self._emit_step(coords, step, prev_step_end)
        for task_id, key in self.pending:
            self.graph.add_dep(task_id, self.keys[key])
        self.graph.meta.update(self._meta())
        return self.graph

    def _ranks(self) -> list[Coords]:
        p = self.plan
        if self.options.folded:
            return [Coords(0, 0, 0, r) for r in range(p.pp)]
        grid = itertools.product(range(p.tp), range(p.cp), range(p.dp), range(p.pp))
        return [Coords(*c) for c in grid]

    def rank(self, c: Coords, pp: int | None = None) -> int:
        """Global rank of ``c`` (optionally with another pipeline coordinate)."""
        return self.rank_of(c.tp, c.cp, c.dp, c.pp if pp is None else pp)

    def add_compute(self, task: Task, deps: list[int]) -> int:
        """Append a compute-stream task and remember it as its rank's latest."""
        self.last_compute[task.rank] = self.graph.add(task, deps)
        return self.last_compute[task.rank]

    # ---- one step of one rank ----
    def _emit_step(self, c: Coords, step: int, prev_step_end: int) -> int:
        if self.p2p is not None:  # the trainer's data loading and schedule setup (framework torch)
            op = Op("host", "other", "step.setup", "step")
            prev_step_end = self.add_compute(Task(rank=self.rank(c), lane="compute", kind="other",
                                                  name="step setup", ops=(op,), step=step),
                                             [prev_step_end] if prev_step_end >= 0 else [])
        gathers = self.dp.step_start_gathers(c, step, prev_step_end)
        first_forward_done: set[int] = set()
        for index, action in enumerate(self.schedule.orders[c.pp]):
            deps = list(gathers.get(action.chunk, ())) if action.chunk not in first_forward_done else []
            first_forward_done.add(action.chunk)
            if prev_step_end >= 0:
                deps.append(prev_step_end)
                prev_step_end = -1
            if self.p2p is not None:
                op = Op("host", "other", f"{action.label(self.schedule.vpp > 1)}.host", "action")
                self.add_compute(Task(rank=self.rank(c), lane="compute", kind="other", name="action setup",
                                      ops=(op,), step=step, stage=action.stage, chunk=action.chunk,
                                      microbatch=action.microbatch), deps)
                deps = self.p2p.before_action(c, step, index, action)
            self._emit_action(c, step, action, deps, index)
        waits = self.p2p.step_end(c, step) if self.p2p is not None else []
        return self.dp.step_end(c, step, waits)

    def _emit_action(self, c: Coords, step: int, a: Action, deps: list[int], index: int = 0) -> None:
        stage = self.stages[a.stage]
        blocks = self.dp.blocks_for(stage, a)
        kind = {"F": "fwd", "B": "bwd_input" if self.split else "bwd", "W": "bwd_weight"}[a.phase]
        name = a.label(self.schedule.vpp > 1)
        rank = self.rank(c)
        first_id = last_id = -1
        if self.act_offload is not None:
            deps = deps + self.act_offload.before_action(c, step, a)
        accumulate = (rank, step, a.stage, a.phase) in self.grad_passes  # gradients of earlier micro-batches
        self.grad_passes.add((rank, step, a.stage, a.phase))
        for i, layers in enumerate(blocks):
            first, last = i == 0, i == len(blocks) - 1
            ops = self.work.block_ops(stage, a.phase, layers, first, last)
            if accumulate:
                ops += self.work.grad_accumulate_ops(stage, a.phase, layers, first, last)
            gather = self.dp.before_block(c, step, stage, a, layers, last_id)
            task = Task(rank=rank, lane="compute", kind=kind, name=name, ops=ops, step=step, stage=a.stage,
                        chunk=a.chunk, microbatch=a.microbatch, layer=layers[0] if len(layers) == 1 else -1)
            block_deps = (deps if i == 0 else []) + ([gather] if gather >= 0 else [])
            last_id = self.add_compute(task, block_deps)
            first_id = last_id if first_id < 0 else first_id
            self.dp.after_block(c, step, stage, a, layers, last_id)
        if self.p2p is not None:
            self.p2p.after_action(c, step, index, a, last_id)
        else:
            self._link_pipeline(c, step, a, first_id, last_id)
        self.dp.after_action(c, step, a, last_id)
        if self.act_offload is not None:
            self.act_offload.after_action(c, step, a, last_id)

    # ---- pipeline links ----
    def _link_pipeline(self, c: Coords, step: int, a: Action, first_id: int, last_id: int) -> None:
        """Wire this action to its producer and, through a send if needed, to its consumer."""
        grid = (step, c.tp, c.cp, c.dp)
        n = self.schedule.num_stages
        if a.phase == "F":
            if a.stage > 0:
                self._want(first_id, ("F",) + grid + (a.stage - 1, a.microbatch))
            if a.stage < n - 1:
                self.keys[("F",) + grid + (a.stage, a.microbatch)] = self._send(c, step, a, last_id, a.stage + 1)
            self.keys[("Fdone",) + grid + (a.stage, a.microbatch)] = last_id
        elif a.phase == "B":
            self._want(first_id, ("Fdone",) + grid + (a.stage, a.microbatch))
            if a.stage < n - 1:
                self._want(first_id, ("B",) + grid + (a.stage + 1, a.microbatch))
            if a.stage > 0:
                self.keys[("B",) + grid + (a.stage, a.microbatch)] = self._send(c, step, a, last_id, a.stage - 1)

    def _want(self, task_id: int, key: Hashable) -> None:
        self.pending.append((task_id, key))

    def _send(self, c: Coords, step: int, a: Action, after: int, to_stage: int) -> int:
        """A send of activations (F) or gradients (B) to ``to_stage``; returns what delivers them."""
        dest_pp = self.schedule.rank_of(to_stage)
        if dest_pp == c.pp:
            return after
        what = "act" if a.phase == "F" else "grad"
        op = self.work.send_op(a, f"{what} {a.label(self.schedule.vpp > 1)}")
        task = Task(rank=self.rank(c), lane="comm.pp", kind="send", name=op.name, ops=(op,),
                    step=step, stage=a.stage, chunk=a.chunk, microbatch=a.microbatch,
                    peer=self.rank(c, dest_pp), ordered=False)
        return self.graph.add(task, [after])

    # ---- metadata ----
    def _meta(self) -> dict[str, object]:
        p = self.plan
        coords = {self.rank(c): (c.tp, c.cp, c.dp, c.pp) for c in self._ranks()}
        return {
            "world_size": p.world_size,
            "folded": self.options.folded,
            "steps": self.options.steps,
            "rank_coords": coords,
            "rank_pp": {r: xyz[3] for r, xyz in coords.items()},
            "model_flops_per_step": model_flops_per_step(self.model, p.global_batch),
            "tokens_per_step": p.global_batch * self.model.seq_len,
            "schedule": self.schedule.name,
            "num_microbatches": p.num_microbatches,
        }


def build_task_graph(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
                     rank_of: RankOf, options: BuildOptions | None = None,
                     work: Work | None = None) -> TaskGraph:
    """The TaskGraph of ``options.steps`` training steps of ``model`` under ``plan``.

    ``work`` prices nothing; it only says what each block does (default: the model's FLOPs and
    bytes; the playground passes fixed unit times).
    """
    return TaskGraphBuilder(model, plan, schedule, rank_of, options or BuildOptions(), work).build()
