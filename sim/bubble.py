"""Closed-form pipeline bubbles of the schedule playground (uniform stages, free sends).

The bubble fraction is the mean over ranks of the share of the step a rank's compute is idle.
On p ranks with m micro-batches (v chunks per rank), per-rank costs F (forward) and B (full
backward, of which W is the weight-gradient part) and sends that cost nothing:

- GPipe, 1F1B: (p-1)/(m+p-1), any costs (Narayanan et al. 2021, sec. 2.2).
- Interleaved 1F1B: (p-1)/(v·m+p-1) when m >= p (ibid.; Megatron needs m a multiple of p, torch's
  rounds keep it for any m >= p).
- ZB-H1: each rank idles (p-1)(T_F + T_B - T_W) with T_B the input-gradient part, which is
  (p-1)·F when T_F = T_B = T_W (:mod:`schedules.pipeline.zb_h1`): (p-1)/(3m+p-1), for m >= p.
- ZB-V: each rank idles p-1 chunk units when T_F = T_B = T_W (:mod:`schedules.pipeline.zbv`), a
  chunk unit being F/2: (p-1)/(6m+p-1), for m >= 2p-1.

Other schedules (interleaved-zb, dualpipev) have no closed form in their modules: none is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from schedules.actions import PipelineSchedule

WITH_CLOSED_FORM = ("gpipe", "1f1b", "interleaved", "interleaved-megatron", "zb-h1", "zbv")


@dataclass(frozen=True)
class ClosedForm:
    """A bubble fraction by formula: ``formula`` in p, m, v; ``value`` exact."""

    formula: str
    value: Fraction

    def describe(self) -> str:
        """E.g. "(p−1)/(m+p−1) = 3/11 = 0.2727"."""
        return f"{self.formula} = {self.value.numerator}/{self.value.denominator} = {float(self.value):.4f}"


def closed_form_bubble(schedule: PipelineSchedule, forward_s: float, backward_s: float,
                       backward_weight_s: float, p2p_s: float) -> ClosedForm | None:
    """The closed-form bubble of ``schedule`` with these per-rank costs, or None where none is known."""
    if p2p_s != 0:
        return None
    p, m, v = schedule.pp, schedule.microbatches, schedule.vpp
    equal_parts = forward_s == backward_s - backward_weight_s == backward_weight_s
    name = schedule.name
    if name in ("gpipe", "1f1b"):
        return ClosedForm("(p−1)/(m+p−1)", Fraction(p - 1, m + p - 1))
    if name in ("interleaved", "interleaved-megatron") and m >= p:
        return ClosedForm("(p−1)/(v·m+p−1)", Fraction(p - 1, v * m + p - 1))
    if name == "zb-h1" and equal_parts and m >= p:
        return ClosedForm("(p−1)/(3m+p−1)", Fraction(p - 1, 3 * m + p - 1))
    if name == "zbv" and equal_parts and m >= 2 * p - 1:
        return ClosedForm("(p−1)/(6m+p−1)", Fraction(p - 1, 6 * m + p - 1))
    return None
