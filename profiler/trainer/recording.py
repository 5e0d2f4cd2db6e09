"""Recording a run with ``torch.profiler``: one gzipped Kineto Chrome trace per rank.

The profiler's wait/warmup/active schedule skips the warm-up steps (the last one is the
profiler's own warm-up) and records the measured steps; the trace is written as
``rank<N>.json.gz`` when the active window closes, atomically.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from profiler.trainer.files import trace_name, write_atomic


class Stepper(Protocol):
    """What the training loop calls after each step."""

    def step(self) -> None: ...


class _NoProfiler:
    def step(self) -> None:
        """Nothing to record."""


def profiler_schedule(warmup_steps: int, steps: int) -> dict[str, int]:
    """wait/warmup/active counts: all warm-up steps but the last are skipped, that one warms up."""
    return {"wait": max(warmup_steps - 1, 0), "warmup": min(warmup_steps, 1), "active": steps}


@contextmanager
def record_steps(out_dir: Path | None, *, rank: int, warmup_steps: int, steps: int,
                 device: torch.device) -> Iterator[Stepper]:
    """Profile the measured steps into ``out_dir/rank<N>.json.gz`` (nothing if ``out_dir`` is None).

    If the body raises, no trace is written for this rank.
    """
    if out_dir is None:
        yield _NoProfiler()
        return
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    path = out_dir / trace_name(rank)
    failed: list[BaseException] = []

    def export(prof: profile) -> None:
        if not failed:  # a failed rank leaves no (incomplete) trace
            write_atomic(path, lambda tmp: prof.export_chrome_trace(str(tmp)))

    with profile(activities=activities, schedule=schedule(**profiler_schedule(warmup_steps, steps),
                                                          repeat=1),
                 on_trace_ready=export, record_shapes=True, with_stack=False) as prof:
        try:
            yield prof
        except BaseException as exc:
            failed.append(exc)
            raise
