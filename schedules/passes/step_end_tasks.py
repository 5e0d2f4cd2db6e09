"""The tasks between a megatron-runtime rank's last gradient reduction and its optimizer update
(:mod:`schedules.step_end_syncs` says what each does and where it comes from): the tied
embedding's gradient all-reduce on the first and the last pipeline rank, the gradient norm, and
its all-reduce, which every simulated rank meets (a barrier across the pipeline stages). The
optimizer task then starts with the host's ``.item()`` of the norm (:func:`with_norm_read`)."""

from __future__ import annotations

from collections.abc import Callable

from core.groups import MP
from core.taskgraph import Op, Task
from core.vocab import Kind, Lane
from schedules.passes.program import STEP_END, BuildContext, Coords, Dep, Emit, Key, Record
from schedules.step_end_syncs import (
    embedding_grad_ops,
    grad_norm_ops,
    norm_allreduce_ops,
    norm_group,
    norm_read_op,
    separate_norm,
)


def applies(ctx: BuildContext) -> bool:
    """Does this build run Megatron's norm as its own task (:func:`schedules.step_end_syncs.separate_norm`;
    not in the schedule playground, whose unit times have no optimizer)?"""
    return ctx.work.steps_optimizer and separate_norm(ctx.plan)


def step_end_records(ctx: BuildContext, c: Coords, step: int, params: float,
                     reductions: tuple[Dep, ...]) -> tuple[list[Record], tuple[Dep, ...]]:
    """Rank ``c``'s tasks after its ``reductions`` and before its update of ``params``
    parameters, and what the update then waits for."""
    rank = ctx.rank(c)
    out: list[Record] = []
    deps = reductions
    ends = any(s.first or s.last for s in ctx.rank_stages(c))  # (none apart under a V-shaped schedule)
    embedding = _shared(ctx, ("embedding_grads",), lambda: embedding_grad_ops(ctx.model, ctx.plan)) if ends else ()
    if embedding:
        key: Key = ("embedding_grads", rank, step)
        group = _group(ctx, f"embedding_grads/{step}", f"/tp{c.tp}cp{c.cp}dp{c.dp}", members=2)
        out.append(Emit(STEP_END, Task(rank=rank, lane=Lane.DP, kind=embedding[0].kind, name="embedding_grads",
                                       ops=embedding, step=step, group=group), key, deps))
        deps = (key,)
    norm_key: Key = ("grad_norm", rank, step)
    out.append(Emit(STEP_END, Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name="grad_norm",
                                   ops=_shared(ctx, ("grad_norm", params), lambda: grad_norm_ops(params)),
                                   step=step), norm_key, deps))
    reduce_ops = _shared(ctx, ("grad_norm.allreduce",), lambda: norm_allreduce_ops(ctx.plan))
    per_group = f"/cp{c.cp}dp{c.dp}" if norm_group(ctx.plan) == MP else ""
    reduce_key: Key = ("grad_norm_allreduce", rank, step)
    out.append(Emit(STEP_END, Task(rank=rank, lane=Lane.DP, kind=reduce_ops[0].kind, name="grad_norm.allreduce",
                                   ops=reduce_ops, step=step,
                                   group=_group(ctx, f"grad_norm/{step}", per_group, members=ctx.plan.pp)),
                    reduce_key, (norm_key,)))
    return out, (reduce_key,)


def with_norm_read(ctx: BuildContext, update: tuple[Op, ...]) -> tuple[Op, ...]:
    """The update's ops after the host's read of the norm (one tuple per build for equal updates:
    the pricer knows a tuple it has priced by its identity)."""
    return _shared(ctx, ("norm_read", update), lambda: (norm_read_op(), *update))


def _shared(ctx: BuildContext, key: tuple[object, ...], make: Callable[[], tuple[Op, ...]]) -> tuple[Op, ...]:
    """``make()``, made once per build for ``key`` (:attr:`BuildContext.shared_ops`)."""
    found = ctx.shared_ops.get(("step_end", *key))
    if found is None:
        found = ctx.shared_ops[("step_end", *key)] = make()
    return found


def _group(ctx: BuildContext, name: str, unfolded: str, members: int) -> str:
    """The collective's group key: its simulated members meet by it (none when the folded graph
    holds one member: it is priced for the whole group all the same)."""
    if ctx.options.folded:
        return name if members > 1 else ""
    return name + unfolded
