"""Pipeline sends and receives as ``torch.distributed.pipelining`` issues them (framework="torch").

Each activation (F) or gradient (B) crossing ranks is a send on the producer and a receive on
the consumer that meet (a rendezvous: gloo and NCCL move the data once both are posted):

- the receive is posted right before the consuming action, after the rank's previous compute
  (the single-stage schedules post it just before waiting for it; the runtime schedules insert
  ``RECV_F``/``RECV_B`` right before the action that needs it), and the action waits for it;
- the send is posted right after the producing action and stays open until the schedule waits
  for it (:func:`send_wait_index`): its span ends no earlier than that wait.

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

from typing import TYPE_CHECKING

from schedules.actions import Action
from schedules.taskgraph import Op, Task

if TYPE_CHECKING:
    from schedules.builder import Coords, TaskGraphBuilder

END = -1
SINGLE_STAGE = ("gpipe", "1f1b")


def send_wait_index(schedule: str, order: tuple[Action, ...], index: int) -> int:
    """Index in ``order`` of the action before which the send issued after ``order[index]`` is
    waited (the action waits for the send to finish); :data:`END` = at the end of the step."""
    if schedule not in SINGLE_STAGE:
        return END
    action = order[index]
    if schedule == "gpipe":
        if action.phase != "F":
            return END
        return next((i for i, a in enumerate(order) if a.phase != "F"), END)
    nxt = order[index + 1] if index + 1 < len(order) else None
    if nxt is None:
        return END
    if nxt.phase != action.phase:
        return index + 1
    return index + 2 if index + 2 < len(order) else END


def pair_key(step: int, grid: tuple[int, int, int], phase: str, consumer_stage: int, microbatch: int) -> str:
    """Rendezvous key shared by a send and its receive (``grid`` = the (tp, cp, dp) coordinates)."""
    tp, cp, dp = grid
    return f"p2p/{step}/{tp}.{cp}.{dp}/{phase}{consumer_stage}/{microbatch}"


class TorchPipeline:
    """Emits the sends, receives and send waits of one task-graph build (framework="torch")."""

    def __init__(self, builder: TaskGraphBuilder) -> None:
        self.b = builder
        self.waits: dict[tuple[int, int, int], list[int]] = {}  # (rank, step, index) -> sends

    def _grid(self, c: Coords) -> tuple[int, int, int]:
        return (c.tp, c.cp, c.dp)

    def _peer_stage(self, a: Action, produce: bool) -> int:
        """The stage a send of ``a`` goes to (``produce``) or a receive of ``a`` comes from; -1 if none."""
        step = 1 if a.phase == "F" else -1
        other = a.stage + step if produce else a.stage - step
        if a.phase == "W" or not 0 <= other < self.b.schedule.num_stages:
            return -1
        return other

    def before_action(self, c: Coords, step: int, index: int, a: Action) -> list[int]:
        """Deps of action ``order[index]``: its receive (posted now) and the sends waited here."""
        rank, deps = self.b.rank(c), []
        posted = self.b.last_compute.get(rank, -1)
        source = self._peer_stage(a, produce=False)
        if source >= 0 and self.b.schedule.rank_of(source) != c.pp:
            peer = self.b.rank(c, self.b.schedule.rank_of(source))
            key = pair_key(step, self._grid(c), a.phase, a.stage, a.microbatch)
            op = self.b.work.send_op(a, f"recv {a.label(self.b.schedule.vpp > 1)}")
            op = Op("comm.pp", "recv", op.name, op.op_class, bytes=op.bytes, dim=op.dim, duration_s=op.duration_s)
            task = Task(rank=rank, lane="comm.pp", kind="recv", name=op.name, ops=(op,), step=step,
                        stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, group=key, peer=peer,
                        ordered=False)
            deps.append(self.b.graph.add(task, [posted]))
        for send in self.waits.pop((rank, step, index), []):
            self.b.graph.add_hold(send, posted)
            deps.append(send)
        return deps

    def after_action(self, c: Coords, step: int, index: int, a: Action, last_id: int) -> None:
        """Post the send of ``a``'s output to the next (F) or previous (B) stage's rank."""
        dest = self._peer_stage(a, produce=True)
        if dest < 0 or self.b.schedule.rank_of(dest) == c.pp:
            return
        rank = self.b.rank(c)
        what = "act" if a.phase == "F" else "grad"
        op = self.b.work.send_op(a, f"{what} {a.label(self.b.schedule.vpp > 1)}")
        key = pair_key(step, self._grid(c), a.phase, dest, a.microbatch)
        task = Task(rank=rank, lane="comm.pp", kind="send", name=op.name, ops=(op,), step=step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, group=key,
                    peer=self.b.rank(c, self.b.schedule.rank_of(dest)), ordered=False)
        send = self.b.graph.add(task, [last_id])
        wait = send_wait_index(self.b.plan.schedule, self.b.schedule.orders[c.pp], index)
        self.waits.setdefault((rank, step, wait), []).append(send)

    def step_end(self, c: Coords, step: int) -> list[int]:
        """Sends waited at the end of the step (they hold until the rank's last compute)."""
        rank = self.b.rank(c)
        sends = self.waits.pop((rank, step, END), [])
        for send in sends:
            self.b.graph.add_hold(send, self.b.last_compute.get(rank, -1))
        return sends
