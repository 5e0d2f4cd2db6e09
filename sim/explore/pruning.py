"""Why plans were pruned: counts per reason and what exactly each broke, in words.

:class:`PruneLog` collects, for every pruned grid point, its reason (one of
:data:`sim.explore.enumerate.REASONS`) and one detail: the product that did not divide (tp*cp*pp,
dp*mbs, pp*vpp), the plan or schedule rule's own message, or the peak memory in GiB. When
nothing survives, :meth:`PruneLog.explain` turns that into one clause per reason, e.g.
``tp*cp*pp (3, 6, 12) does not divide 8 GPUs: 96 plans``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

REASONS = ("gpus % (tp*cp*pp)", "global batch % (dp*mbs)", "layers % (pp*vpp)", "plan rules",
           "schedule", "memory")
"""Pruning reasons, in the order :mod:`sim.explore.enumerate` applies them."""
BOUND_REASON = "slower than the top plans (step-time bound)"
"""Plans not timed because their step-time lower bound is above the top plans' times
(:mod:`sim.explore.bound_prune`; counted after evaluation, not one of :data:`REASONS`)."""
STRUCTURAL = REASONS[:5]  # every reason but memory: the plan cannot run at all
MAX_LISTED = 6  # values quoted per reason
MAX_MESSAGES = 2  # rule messages (whole sentences) quoted per reason


@dataclass(frozen=True)
class PruneContext:
    """What the clauses quote: the GPU count, global batch, layers and memory (GiB)."""

    gpus: int
    global_batch: int
    layers: int
    hbm_gib: float
    usable_gib: float


@dataclass
class PruneLog:
    """Pruned grid points of one (design, GPU count): counts and details per reason."""

    counts: Counter[str] = field(default_factory=Counter)
    details: dict[str, set[Any]] = field(default_factory=dict)
    smallest_peak_gib: float = float("inf")

    def add(self, reason: str, detail: Any) -> None:
        """Count one pruned point; ``detail`` is a number or message (a float GiB for memory)."""
        self.counts[reason] += 1
        if isinstance(detail, float):
            self.smallest_peak_gib = min(self.smallest_peak_gib, detail)
        else:
            self.details.setdefault(reason, set()).add(detail)

    @property
    def fit_pruned(self) -> int:
        """Pruned plans that could run but do not fit in memory."""
        return self.counts[REASONS[5]]

    def explain(self, ctx: PruneContext) -> str:
        """One line: each reason's clause and its plan count, from the rule applied last (the
        plans that got furthest: memory) to the first."""
        clauses = [f"{self._clause(reason, ctx)}: {self.counts[reason]:,} plan{'s' if self.counts[reason] != 1 else ''}"
                   for reason in reversed(REASONS) if self.counts[reason]]
        return "; ".join(clauses) if clauses else "no plan in the requested space"

    def _clause(self, reason: str, ctx: PruneContext) -> str:
        details = self.details.get(reason, set())
        listed = _listed(details)
        if reason == REASONS[0]:
            return f"tp*cp*pp ({listed}) does not divide {ctx.gpus} GPUs"
        if reason == REASONS[1]:
            return f"global batch {ctx.global_batch} does not split into dp*mbs ({listed}) micro-batches"
        if reason == REASONS[2]:
            return f"{ctx.layers} layers do not split into pp*vpp ({listed}) stages"
        if reason == REASONS[5]:
            return (f"does not fit in {ctx.hbm_gib:.0f} GiB ({ctx.usable_gib:.1f} GiB usable; "
                    f"smallest peak {self.smallest_peak_gib:.1f} GiB)")
        return _listed(details, MAX_MESSAGES)  # plan rules and schedules: their own messages


def _listed(values: set[Any], limit: int = MAX_LISTED) -> str:
    """Up to ``limit`` values (all of one type), sorted, joined (``... (N in all)`` when more)."""
    ordered = sorted(values)
    text = ", ".join(map(str, ordered[:limit]))
    return text + (f", ... ({len(ordered)} in all)" if len(ordered) > limit else "")
