"""The step pass: a step starts after the rank's previous step ended, and the included trainer's
host work around the schedule.

- Megatron-LM (and the playground): the step's first compute block waits for the previous
  step's end (its optimizer step, or whatever :mod:`schedules.passes.dp` ends the step with).
- The included trainer (framework="torch") spends host time before the schedule (data loading,
  schedule setup: a ``step`` op) and before every action (``torch.distributed.pipelining``'s
  bookkeeping: an ``action`` op), each a compute-stream task; the step's setup waits for the
  previous step's end.
"""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, OpClass
from schedules.passes.program import (
    STEP_START,
    ActionSlot,
    BuildContext,
    Coords,
    Edge,
    Emit,
    Key,
    Record,
    before_action,
    first_block_key,
    step_end_key,
)


def setup_key(rank: int, step: int, index: int) -> Key:
    """Key of the trainer's host setup before action ``index`` (-1: the step's setup)."""
    return ("setup", rank, step, index)


def step_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The step's link to the previous one, and (framework="torch") the host setup tasks."""
    rank = ctx.rank(c)
    prev = (step_end_key(rank, step - 1),) if step > 0 else ()
    if not ctx.torch:
        return [Edge(STEP_START, first_block_key(rank, step, slots[0]), prev[0])] if prev and slots else []
    op = Op(Lane.HOST, Kind.OTHER, "step.setup", OpClass.STEP)
    out: list[Record] = [Emit(STEP_START, Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.OTHER, name="step setup",
                                               ops=(op,), step=step), setup_key(rank, step, -1), prev)]
    for slot in slots:
        a = slot.action
        op = Op(Lane.HOST, Kind.OTHER, f"{ctx.label(a)}.host", OpClass.ACTION)
        task = Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.OTHER, name="action setup", ops=(op,), step=step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch)
        deps = (setup_key(rank, step, -1),) if slot.index == 0 else ()
        out.append(Emit(before_action(slot.index), task, setup_key(rank, step, slot.index), deps))
    return out
