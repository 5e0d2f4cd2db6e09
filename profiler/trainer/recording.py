"""Recording a run with ``torch.profiler``: one gzipped Kineto Chrome trace per rank.

The profiler's wait/warmup/active schedule skips the warm-up steps (the last one is the
profiler's own warm-up) and records the measured steps; the trace is written as
``rank<N>.json.gz`` when the active window closes, atomically, and only if it is complete.
"""

from __future__ import annotations

import errno
import gzip
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from profiler.trainer.files import trace_name
from sim.atomic import temp_path, write_with

_TAIL_BYTES = 64


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
            export_trace(prof, path)

    with profile(activities=activities, schedule=schedule(**profiler_schedule(warmup_steps, steps),
                                                          repeat=1),
                 on_trace_ready=export, record_shapes=True, with_stack=False) as prof:
        try:
            yield prof
        except BaseException as exc:
            failed.append(exc)
            raise


def export_trace(prof: profile, path: Path) -> Path:
    """Write ``prof``'s Kineto trace gzipped to ``path`` (the rule of :mod:`sim.atomic`).

    Kineto writes the JSON itself and reports no write error (under a full disk or ``ulimit -f``
    torch's own ``.gz`` export gzips whatever part was written and succeeds), so the plain JSON
    goes to a temporary file beside ``path`` first (Kineto writes it as ``<it>.tmp`` and renames
    it when done, not when a write failed), must end as a complete JSON object, and is
    compressed here, where a failed write raises."""
    def fill(tmp: Path) -> None:
        plain = temp_path(path)
        try:
            prof.export_chrome_trace(str(plain))
            check_complete_json(plain)
            with open(plain, "rb") as src, open(tmp, "wb") as raw, \
                    gzip.GzipFile(filename="", mode="wb", fileobj=raw) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)
        finally:
            plain.unlink(missing_ok=True)
            plain.with_name(plain.name + ".tmp").unlink(missing_ok=True)  # Kineto's own, left when it failed

    return write_with(path, fill)


def check_complete_json(path: Path) -> None:
    """Raise OSError unless ``path`` ends like a complete JSON object (its last non-blank byte
    is ``}``): a cut-off export (disk full, file-size limit) does not."""
    if not path.is_file():
        raise OSError(errno.EIO, "the profiler's trace export did not complete (disk full or file-size limit?)")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        fh.seek(max(0, size - _TAIL_BYTES))
        tail = fh.read().rstrip()
    if not tail.endswith(b"}"):
        raise OSError(errno.EIO, f"the profiler's trace export stopped short ({size:,} bytes, not a complete "
                                 "JSON object: disk full or file-size limit?)")
