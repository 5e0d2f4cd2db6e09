"""Shared pieces of the schedule builders: input validation and assembling a PipelineSchedule.

Every builder takes ``(pp, microbatches, vpp)`` and returns a :class:`PipelineSchedule`; bad
inputs raise the one-line ``ValueError`` of :func:`core.errors.invalid`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.errors import invalid, require_positive_int
from schedules.actions import Action, PipelineSchedule, stage_chunk, stage_index


def check_sizes(pp: int, microbatches: int, vpp: int) -> None:
    """Raise unless pp, microbatches and vpp are integers >= 1."""
    require_positive_int("pp", pp)
    require_positive_int("microbatches", microbatches)
    require_positive_int("vpp", vpp)


def require_vpp(name: str, vpp: int, allowed: Sequence[int]) -> None:
    """Raise unless ``vpp`` is one of the chunk counts schedule ``name`` runs with."""
    if vpp not in allowed:
        shown = " or ".join(f"vpp={v}" for v in allowed)
        raise invalid("vpp", vpp, f"the {name} schedule runs with {shown}")


def interleave_group(pp: int, microbatches: int, name: str) -> int:
    """Micro-batches per round of an interleaved schedule, as torch computes it.

    torch runs ``rounds = max(1, m // pp)`` rounds of ``m // rounds`` micro-batches each
    (equal to ``pp`` when ``m % pp == 0``) and needs ``m`` to be a multiple of ``rounds``.
    """
    rounds = max(1, microbatches // pp)
    if microbatches % rounds:
        raise invalid("microbatches", microbatches,
                      f"{name} needs a multiple of rounds = max(1, microbatches // pp) = {rounds}"
                      f" (e.g. {rounds * (microbatches // rounds)} or a multiple of pp={pp})")
    return microbatches // rounds


def act(stage: int, phase: str, microbatch: int, pp: int, stage_map: str = "loop") -> Action:
    """An action with its rank-local chunk filled in from the stage map."""
    return Action(stage, phase, microbatch, stage_chunk(stage, pp, stage_map))


def chunk_stage(rank: int, chunk: int, pp: int, stage_map: str = "loop") -> int:
    """Virtual stage of ``rank``'s ``chunk``-th chunk."""
    return stage_index(rank, chunk, pp, stage_map)


def assemble(name: str, pp: int, microbatches: int, vpp: int,
             orders: Iterable[Iterable[Action]], stage_map: str = "loop") -> PipelineSchedule:
    """Freeze per-rank action lists into a :class:`PipelineSchedule`."""
    return PipelineSchedule(name=name, pp=pp, microbatches=microbatches, vpp=vpp,
                            orders=tuple(tuple(order) for order in orders), stage_map=stage_map)
