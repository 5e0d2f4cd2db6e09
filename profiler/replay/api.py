"""Replay a measured run, unchanged and under what-if knobs, and compare the step times.

    result = replay_run("traces/dp4-zero3", WhatIf(scale=(("compute", 0.5),)))
    result.ranks        # per rank and step: measured, replayed, what-if step times
    result.summary()    # the JSON object of ``trainsim replay --json``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.kineto import ParsedRun, load_run
from profiler.measured import measured_step_s, step_statistic
from profiler.replay.build import build_replay_model
from profiler.replay.knobs import WhatIf
from profiler.replay.model import ReplayModel
from profiler.replay.simulate import ReplayRun, run_replay
from profiler.replay.whatif import apply_whatif
from sim.metrics import StepMetrics, step_metrics
from sim.summary import round_sig

METRIC_KEYS = ("step_time_s", "bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction")


@dataclass
class ReplayResult:
    """A run, its replay model, the unchanged replay and (with knobs) the what-if replay."""

    run_name: str
    parsed: ParsedRun
    model: ReplayModel
    whatif: WhatIf
    base: ReplayRun
    changed: ReplayRun | None
    notes: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> pd.DataFrame:
        """rank, step, measured_s, replayed_s, error_pct, and whatif_s, change_pct with knobs."""
        measured = self.model.measured["table"][["rank", "step", "step_time_s"]]
        out = measured.rename(columns={"step_time_s": "measured_s"}).merge(
            self.base.windows[["rank", "step", "step_time_s"]].rename(columns={"step_time_s": "replayed_s"}),
            on=["rank", "step"], how="left")
        out["error_pct"] = (out["replayed_s"] / out["measured_s"] - 1.0) * 100.0
        if self.changed is not None:
            w = self.changed.windows[["rank", "step", "step_time_s"]].rename(columns={"step_time_s": "whatif_s"})
            out = out.merge(w, on=["rank", "step"], how="left")
            out["change_pct"] = (out["whatif_s"] / out["replayed_s"] - 1.0) * 100.0
        return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)

    def metrics(self) -> dict[str, StepMetrics]:
        """Shared metrics of the measured, replayed and what-if Timelines."""
        out = {"measured": step_metrics(self.model.measured["timeline"]), "replayed": step_metrics(self.base.timeline)}
        if self.changed is not None:
            out["whatif"] = step_metrics(self.changed.timeline)
        return out

    def summary(self) -> dict[str, Any]:
        """The JSON object ``trainsim replay --json`` prints (stable keys)."""
        ranks = self.ranks
        metrics = {k: {key: round_sig(_step_s(m) if key == "step_time_s" else float(getattr(m, key)))
                       for key in METRIC_KEYS} for k, m in self.metrics().items()}
        rows = [{k: (int(v) if k in ("rank", "step") else round_sig(float(v))) for k, v in row.items()}
                for row in ranks.to_dict("records")]
        return {
            "run": self.run_name, "world_size": self.model.world_size, "ranks_in_trace": len(self.parsed.timeline.ranks),
            "knobs": self.whatif.describe(), "metrics": metrics,
            "step_time_statistic": step_statistic(int(ranks["step"].nunique())),
            "max_abs_error_pct": round_sig(float(ranks["error_pct"].abs().max())),
            "ranks": rows, "matching": self.matching_summary(), "notes": list(self.notes),
        }

    def matching_summary(self) -> dict[str, Any]:
        """What the replay could couple across ranks."""
        m = self.model.matching
        return {"collectives_by_key": m.by_key, "collectives_by_time": m.by_time, "p2p_pairs": len(m.p2p),
                "communication_spans": m.comm_items, "unmatched_spans": len(m.unmatched),
                "matched_fraction": round_sig(m.matched_fraction), "dependencies": dict(self.model.rule_counts)}


def _step_s(m: StepMetrics) -> float:
    """The step time of a measured, replayed or what-if timeline by the one definition of a measured
    step (:data:`profiler.measured.MEASURED_STEP`), so replay's measured step is analyze's."""
    found = measured_step_s(m.per_rank)
    return m.step_time_s if found is None else found[0]


def replay_parsed(name: str, parsed: ParsedRun, whatif: WhatIf | None = None, *,
                  allow_partial: bool = False) -> ReplayResult:
    """Replay a parsed run unchanged and, when ``whatif`` changes anything, under it."""
    whatif = whatif or WhatIf()
    model = build_replay_model(parsed, allow_partial=allow_partial)
    base = run_replay(model)
    changed: ReplayRun | None = None
    knob_notes: list[str] = []
    if not whatif.empty:
        params, knob_notes = apply_whatif(model, whatif)
        changed = run_replay(model, params)
    notes = [*model.notes, *knob_notes, *_partial_notes(parsed, model)]
    return ReplayResult(run_name=name, parsed=parsed, model=model, whatif=whatif, base=base,
                        changed=changed, notes=notes)


def replay_run(path: str | Path, whatif: WhatIf | None = None, *, all_steps: bool = False,
               allow_partial: bool = False) -> ReplayResult:
    """Parse the run at ``path`` and replay it (see :func:`replay_parsed`)."""
    return replay_parsed(str(path), load_run(path, all_steps=all_steps), whatif, allow_partial=allow_partial)


def _partial_notes(parsed: ParsedRun, model: ReplayModel) -> list[str]:
    world = model.world_size
    present = len(parsed.timeline.ranks)
    notes = []
    if present < world:
        notes.append(f"partial run: {present} of {world} ranks traced; the replay covers the traced ranks "
                     "only, with the untraced ranks' influence frozen in the measured waits")
    skipped = parsed.timeline.meta.warnings
    notes.extend(w for w in skipped if "no CPU launch" in w)
    return notes
