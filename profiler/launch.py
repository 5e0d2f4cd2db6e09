"""Launching the trainer: torchrun on this machine, or the command line for a GPU cluster.

:func:`run_profile` starts ``python -m torch.distributed.run --standalone`` (a free rendezvous
port per launch) as a subprocess, streams its output to ``<out>/launch.log`` and to a callback,
enforces a timeout, and collects what the ranks left: traces, the manifest, and per-rank
one-line errors. :func:`launch_command` gives the torchrun line to run on every node of a
multi-node job. Torch is not imported here.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from profiler.trainer.args import config_to_argv
from profiler.trainer.config import TrainConfig
from profiler.trainer.files import ERRORS_DIR, MANIFEST, PIDS_DIR, trace_name

LOG_NAME = "launch.log"
GRACE_S = 15.0  # after a timeout: SIGTERM to torchrun, then SIGKILL after this long


@dataclass(frozen=True, kw_only=True)
class ProfileRun:
    """Outcome of one launch.

    Attributes:
        out_dir: where the traces, the manifest and ``launch.log`` are.
        returncode: torchrun's exit code (negative: killed by a signal).
        wall_time_s: launch wall-clock time, process start to exit.
        timed_out: the launch was stopped at the timeout.
        traces: the trace files present after the run (ranks that finished).
        manifest: the manifest (written by rank 0 after a successful run), or None.
        errors: per failed rank, its one-line error (``Type: message``), earliest first.
    """

    out_dir: Path
    returncode: int
    wall_time_s: float
    timed_out: bool
    traces: list[Path]
    manifest: dict[str, Any] | None
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every rank finished and the manifest was written."""
        return self.returncode == 0 and self.manifest is not None and not self.timed_out

    @property
    def log_path(self) -> Path:
        """The combined output of torchrun and the ranks."""
        return self.out_dir / LOG_NAME

    def failure(self) -> str | None:
        """One line saying why the run failed (the first failing rank and its error), or None."""
        if self.ok:
            return None
        if self.timed_out:
            return f"timed out after {self.wall_time_s:.0f} s; see {self.log_path}"
        if self.errors:
            rank, error = next(iter(self.errors.items()))
            return f"rank {rank} failed: {error}"
        return f"torchrun exited with code {self.returncode}; see {self.log_path}"


def worker_argv(config: TrainConfig, out_dir: str) -> list[str]:
    """Arguments after the torchrun options: the worker module and its flags."""
    return ["-m", "profiler.trainer", *config_to_argv(config), "--out", out_dir]


def launch_command(config: TrainConfig, out_dir: str = "trainsim-run", *,
                   nproc_per_node: str = "$NPROC_PER_NODE") -> str:
    """The torchrun command line to run on every node of a multi-node cluster.

    Placeholders (shell variables): ``$NNODES``, ``$NODE_RANK``, ``$MASTER_ADDR``,
    ``$MASTER_PORT``, ``$NPROC_PER_NODE``, ``$RUN_ID``; NNODES * NPROC_PER_NODE must equal
    tp * pp * dp = ``config.world_size``.
    """
    torchrun = ["python", "-m", "torch.distributed.run", "--nnodes=$NNODES",
                f"--nproc-per-node={nproc_per_node}", "--node-rank=$NODE_RANK",
                "--rdzv-backend=c10d", "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
                "--rdzv-id=$RUN_ID"]
    worker = [shlex.quote(arg) for arg in worker_argv(config, out_dir)]
    return " ".join(torchrun + worker)


def torchrun_argv(config: TrainConfig, out_dir: Path) -> list[str]:
    """The local single-node torchrun command (one process per rank)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={config.world_size}", "--max-restarts=0",
            *worker_argv(config, str(out_dir))]


def clear_outputs(out_dir: Path) -> None:
    """Remove a previous run's trainsim outputs from ``out_dir`` (only files it writes)."""
    for path in out_dir.glob("rank*.json.gz"):
        path.unlink()
    for name in (MANIFEST, LOG_NAME):
        (out_dir / name).unlink(missing_ok=True)
    for name in (ERRORS_DIR, PIDS_DIR):
        shutil.rmtree(out_dir / name, ignore_errors=True)


def worker_env(config: TrainConfig) -> dict[str, str]:
    """Environment of torchrun: one CPU thread per rank, unbuffered output, importable repo."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_profile(config: TrainConfig, out_dir: Path, *, timeout_s: float = 600.0,
                on_line: Callable[[str], None] | None = None) -> ProfileRun:
    """Run ``config`` under torchrun on this machine, recording into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(out_dir)
    start_s = time.monotonic()
    with open(out_dir / LOG_NAME, "w") as log:
        proc = subprocess.Popen(torchrun_argv(config, out_dir), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=worker_env(config),
                                start_new_session=True)
        timed_out = _pump(proc, log, deadline_s=start_s + timeout_s, on_line=on_line)
    if timed_out:
        _stop(proc, out_dir)
    wall_s = time.monotonic() - start_s
    shutil.rmtree(out_dir / PIDS_DIR, ignore_errors=True)
    return ProfileRun(out_dir=out_dir, returncode=proc.returncode, wall_time_s=wall_s,
                      timed_out=timed_out, traces=_traces(out_dir, config.world_size),
                      manifest=_manifest(out_dir), errors=read_errors(out_dir))


def _pump(proc: subprocess.Popen[str], log: IO[str], *, deadline_s: float,
          on_line: Callable[[str], None] | None) -> bool:
    """Copy output lines to ``log`` and ``on_line`` until exit; True if the deadline passed."""
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None  # noqa: S101 - set by Popen(stdout=PIPE)
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    while True:
        try:
            line = lines.get(timeout=max(0.0, min(1.0, deadline_s - time.monotonic())))
        except queue.Empty:
            if time.monotonic() >= deadline_s:
                return True
            continue
        if line is None:
            proc.wait()
            return False
        log.write(line)
        if on_line is not None:
            on_line(line.rstrip("\n"))


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stop(proc: subprocess.Popen[str], out_dir: Path) -> None:
    """Stop torchrun (it stops its workers), then kill whatever is left of our processes."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid_file in (out_dir / PIDS_DIR).glob("rank*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def _traces(out_dir: Path, world_size: int) -> list[Path]:
    return [out_dir / trace_name(r) for r in range(world_size) if (out_dir / trace_name(r)).exists()]


def _manifest(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def read_errors(out_dir: Path) -> dict[int, str]:
    """Per-rank one-line errors the workers recorded, earliest first."""
    records = [json.loads(p.read_text()) for p in (out_dir / ERRORS_DIR).glob("rank*.json")]
    records.sort(key=lambda r: (r["time_unix_s"], r["rank"]))
    return {r["rank"]: f"{r['type']}: {r['message']}" for r in records}
