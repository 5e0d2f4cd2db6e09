"""The pipeline pass as ``torch.distributed.pipelining`` runs it (framework="torch"), and as
Megatron runs blocking P2P (``ParallelPlan.blocking_p2p``: every send is waited before the next
action, together with the receive that action needs, as Megatron's batched
``send_forward_recv_backward`` and its kin do).

Each activation (F) or gradient (B) crossing ranks is a send on the producer and a receive on
the consumer that meet (a rendezvous: gloo and NCCL move the data once both are posted):

- the receive is posted right before the consuming action, after the rank's previous compute
  (the single-stage schedules post it just before waiting for it; the runtime schedules insert
  ``RECV_F``/``RECV_B`` right before the action that needs it), and the action waits for it;
- the send is posted right after the producing action and stays open until the schedule waits
  for it (:func:`send_wait_index`): its span ends no earlier than that wait.

With Megatron-LM's scatter/gather (``plan.scatter_gather_p2p``) each receive is followed, on the
compute stream, by the all-gather over TP of the message's 1/tp pieces, which the action waits for.

Megatron's interleaved schedule with blocking P2P (vpp > 1) communicates in lock-step instead
(:func:`megatron_iterations`): its loop runs an *iteration* (a warm-up forward, a steady-state
forward and backward, or a cool-down backward), then one batched call that sends the iteration's
outputs and receives the next iteration's inputs, waited and followed by a device synchronize
(``send_forward_backward_recv_forward_backward`` and its kin; Megatron-LM ``megatron/schedules.py``
@fda81a212b l.228-350, ``p2p_communication.py`` l.108-112 and 251-266). So a forward's output leaves only after
the backward of its iteration, a backward's gradient is received before the forward that precedes
it, and the next iteration starts only when every send and receive of the call is done. (With
``m == p`` Megatron-LM sends the last warm-up output and receives the first gradient in two calls;
modelled as one.)

Wait points, from torch 2.13's ``schedules.py``:

- ``ScheduleGPipe``: forward sends are waited after the last forward (before the first
  backward), backward sends at the end of the step.
- ``Schedule1F1B``: a send is waited together with the next receive, i.e. before the next
  action, when the next action is of the other kind (steady state, and the last warm-up
  forward fused with the first backward's receive); in warm-up (F followed by F) and cool-down
  (B followed by B) the previous send is waited after the next action has computed.
- the runtime schedules (interleaved 1F1B, zero-bubble, ZB-V, DualPipeV): every send is waited
  at the end of the step.
"""

from __future__ import annotations

from core.taskgraph import Task
from core.vocab import Kind, Lane, Phase
from schedules.actions import Action
from schedules.passes.program import (
    PREV_COMPUTE,
    STEP_END,
    ActionSlot,
    BuildContext,
    Coords,
    Edge,
    Emit,
    Hold,
    Key,
    Record,
    after_action,
    before_action,
    first_block_key,
    last_block_key,
    optimizer_key,
)

END = -1
SINGLE_STAGE = ("gpipe", "1f1b")
_WAIT = 1  # sub-point of "before action": after the host's setup of the action


def send_wait_index(schedule: str, order: tuple[Action, ...], index: int, blocking: bool = False) -> int:
    """Index in ``order`` of the action before which the send issued after ``order[index]`` is
    waited (the action waits for the send to finish); :data:`END` = at the end of the step.
    ``blocking`` (Megatron's batched P2P with a device synchronize): before the next action."""
    if blocking:
        return index + 1 if index + 1 < len(order) else END
    if schedule not in SINGLE_STAGE:
        return END
    action = order[index]
    if schedule == "gpipe":
        if action.phase != Phase.F:
            return END
        return next((i for i, a in enumerate(order) if a.phase != Phase.F), END)
    nxt = order[index + 1] if index + 1 < len(order) else None
    if nxt is None:
        return END
    if nxt.phase != action.phase:
        return index + 1
    return index + 2 if index + 2 < len(order) else END


def _peer_stage(ctx: BuildContext, a: Action, produce: bool) -> int:
    """The stage a send of ``a`` goes to (``produce``) or a receive of ``a`` comes from; -1 if none."""
    step = 1 if a.phase == Phase.F else -1
    other = a.stage + step if produce else a.stage - step
    if a.phase == Phase.W or not 0 <= other < ctx.schedule.num_stages:
        return -1
    return other


class _Links:
    """Rank ``c``'s (global ``rank``) pipeline messages in ``step``: for an action's phase and
    stage, the stage it sends to or receives from and the global rank holding it (None: no
    message, or one that stays on this rank), worked out once per (phase, stage, direction)."""

    __slots__ = ("ctx", "c", "rank", "step", "prefix", "_memo")

    def __init__(self, ctx: BuildContext, c: Coords, rank: int, step: int) -> None:
        self.ctx, self.c, self.rank, self.step = ctx, c, rank, step
        self.prefix = f"p2p/{step}/{c.tp}.{c.cp}.{c.dp}/"  # by the (tp, cp, dp) coordinates
        self._memo: dict[tuple[str, int, bool], tuple[int, int] | None] = {}

    def peer(self, a: Action, produce: bool) -> tuple[int, int] | None:
        """(the other stage, its global rank) of ``a``'s send (``produce``) or receive."""
        key = (a.phase, a.stage, produce)
        if key in self._memo:
            return self._memo[key]
        other, found = _peer_stage(self.ctx, a, produce), None
        if other >= 0:
            pp = self.ctx.schedule.rank_of(other)
            if pp != self.c.pp:
                found = (other, self.ctx.rank(self.c, pp))
        self._memo[key] = found
        return found

    def pair(self, phase: str, consumer_stage: int, microbatch: int) -> str:
        """The rendezvous key a send and its receive share (``Task.group``)."""
        return f"{self.prefix}{phase}{consumer_stage}/{microbatch}"


def megatron_iterations(order: tuple[Action, ...]) -> tuple[int, ...]:
    """For each action of a rank's interleaved 1F1B ``order``, the index of the first action of
    the Megatron-LM loop iteration it runs in: warm-up forwards one per iteration, then
    (forward, backward) pairs, then cool-down backwards one per iteration; every action alone
    when all forwards run first (Megatron-LM's ``all_warmup_microbatches``, m == p)."""
    forwards = sum(1 for a in order if a.phase == Phase.F)
    lead = next((i for i, a in enumerate(order) if a.phase != Phase.F), len(order))
    if lead >= forwards:
        return tuple(range(len(order)))
    warmup = lead - 1
    pairs = forwards - warmup
    steady = order[warmup:warmup + 2 * pairs]
    if any(a.phase != (Phase.F if i % 2 == 0 else Phase.B) for i, a in enumerate(steady)) \
            or any(a.phase != Phase.B for a in order[warmup + 2 * pairs:]):
        raise ValueError("lock-step P2P needs an interleaved 1F1B order (forwards, forward/backward pairs, "
                         "backwards)")
    firsts = list(range(warmup))
    for k in range(pairs):
        firsts += [warmup + 2 * k] * 2
    return tuple(firsts + list(range(warmup + 2 * pairs, len(order))))


def p2p_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """Receives, sends and send waits of rank ``c``'s ``step``."""
    if ctx.plan.blocking_p2p and ctx.schedule.vpp > 1:
        return lockstep_records(ctx, c, step, slots)
    rank, order = ctx.rank(c), ctx.schedule.orders[c.pp]
    links = _Links(ctx, c, rank, step)
    schedule, blocking, gathers = ctx.plan.schedule, ctx.plan.blocking_p2p, ctx.plan.scatter_gather_p2p
    waits: dict[int, list[Key]] = {}
    out: list[Record] = []
    for slot in slots:
        point, first = before_action(slot.index, _WAIT), first_block_key(rank, step, slot)
        recv = _recv(links, slot)
        if recv is not None:
            gather = _gather(ctx, rank, step, slot, recv) if gathers else None
            out += [recv, Edge(point, first, recv.key)] if gather is None else [recv, gather, Edge(point, first, gather.key)]
        for send in waits.pop(slot.index, []):
            out += [Hold(point, send, PREV_COMPUTE), Edge(point, first, send)]
        send_emit = _send(links, slot)
        if send_emit is not None:
            out.append(send_emit)
            waits.setdefault(send_wait_index(schedule, order, slot.index, blocking), []).append(send_emit.key)
    for send in waits.pop(END, []):
        out += [Hold(STEP_END, send, PREV_COMPUTE), Edge(STEP_END, optimizer_key(rank, step), send)]
    return out


def lockstep_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """Rank ``c``'s receives, sends and waits under Megatron's interleaved lock-step (module doc):
    before each iteration, one batch of the previous iteration's sends and this iteration's
    receives (then their TP gathers), all of which the iteration's first action waits for."""
    rank = ctx.rank(c)
    firsts = megatron_iterations(ctx.schedule.orders[c.pp])
    links = _Links(ctx, c, rank, step)
    by_first: dict[int, list[ActionSlot]] = {}
    for slot in slots:
        by_first.setdefault(firsts[slot.index], []).append(slot)
    out: list[Record] = []
    sends: list[Key] = []  # the previous iteration's, posted after its last action
    for first_index, members in by_first.items():
        point, first = before_action(first_index, _WAIT), first_block_key(rank, step, members[0])
        for send in sends:
            out += [Hold(point, send, PREV_COMPUTE), Edge(point, first, send)]
        received: list[tuple[ActionSlot, Emit]] = []
        for slot in members:
            recv = _recv(links, slot, first_index)
            if recv is not None:
                received.append((slot, recv))
                out.append(recv)
        for slot, recv in received:
            gather = _gather(ctx, rank, step, slot, recv, first_index) if ctx.plan.scatter_gather_p2p else None
            done = recv.key if gather is None else gather.key
            if gather is not None:
                out.append(gather)
            out.append(Edge(point, first, done))  # the iteration's later actions follow on the compute stream
        last = last_block_key(rank, step, members[-1])
        sends = []
        for slot in members:
            send = _send(links, slot, members[-1].index, last)
            if send is not None:
                out.append(send)
                sends.append(send.key)
    for send in sends:
        out += [Hold(STEP_END, send, PREV_COMPUTE), Edge(STEP_END, optimizer_key(rank, step), send)]
    return out


def _recv(links: _Links, slot: ActionSlot, at: int | None = None) -> Emit | None:
    """The receive action ``slot`` waits for on the links' rank, posted before action ``at``
    (default: ``slot``'s own) after the rank's latest compute."""
    a = slot.action
    peer = links.peer(a, produce=False)
    if peer is None:
        return None
    rank, step = links.rank, links.step
    ops = links.ctx.message_ops(a, "recv")
    task = Task(rank=rank, lane=Lane.PP, kind=Kind.RECV, name=ops[0].name, ops=ops, step=step, stage=a.stage,
                chunk=a.chunk, microbatch=a.microbatch, group=links.pair(a.phase, a.stage, a.microbatch),
                peer=peer[1], ordered=False)
    point = before_action(slot.index if at is None else at, _WAIT)
    return Emit(point, task, ("recv", rank, step, slot.index), (PREV_COMPUTE,))


def _gather(ctx: BuildContext, rank: int, step: int, slot: ActionSlot, recv: Emit,
            at: int | None = None) -> Emit | None:
    """Megatron-LM's scatter/gather (``plan.scatter_gather_p2p``): the received 1/tp pieces
    all-gathered over TP on the compute stream, after the receive, before the action (None when
    the work prices it at nothing)."""
    ops = ctx.work.recv_gather_ops()
    if not ops:
        return None
    a = slot.action
    task = Task(rank=rank, lane=Lane.COMPUTE, kind=ops[0].kind, name=f"gather {ctx.label(a)}", ops=ops, step=step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch)
    point = before_action(slot.index if at is None else at, _WAIT)
    return Emit(point, task, ("gather", rank, step, slot.index), (recv.key,))


def _send(links: _Links, slot: ActionSlot, at: int | None = None, after: Key | None = None) -> Emit | None:
    """The send of ``slot``'s output on the links' rank to the next (F) or previous (B) stage's
    rank, if another: posted after action ``at`` (default: ``slot``) and after ``after``
    (default: ``slot``'s last block)."""
    a = slot.action
    peer = links.peer(a, produce=True)
    if peer is None:
        return None
    rank, step = links.rank, links.step
    ops = links.ctx.message_ops(a, "act" if a.phase == Phase.F else "grad")
    task = Task(rank=rank, lane=Lane.PP, kind=Kind.SEND, name=ops[0].name, ops=ops, step=step, stage=a.stage,
                chunk=a.chunk, microbatch=a.microbatch, group=links.pair(a.phase, peer[0], a.microbatch),
                peer=peer[1], ordered=False)
    own = last_block_key(rank, step, slot)
    deps = (own,) if after is None or after == own else (own, after)
    return Emit(after_action(slot.index if at is None else at), task, ("send", rank, step, slot.index), deps)
