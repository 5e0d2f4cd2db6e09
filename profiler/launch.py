"""Launching the trainer: torchrun on this machine, or the command line for a GPU cluster.

:func:`run_profile` starts ``python -m torch.distributed.run --standalone`` (a free rendezvous
port per launch) through :mod:`profiler.launch_agent` (which stops torchrun and the ranks if the
launcher dies), records into a hidden staging directory beside ``out`` (:mod:`profiler.launch_dirs`),
streams the output to its ``launch.log`` (line-buffered) and to a callback, and enforces a
timeout. SIGINT and SIGTERM received while it runs, like the timeout, stop torchrun's process
group and every rank's (:mod:`profiler.launch_stop`: SIGTERM, 5 s, SIGKILL); it returns only when
none of them is left. When every rank exited 0, wrote the manifest and a trace that parses
(:mod:`profiler.launch_traces`), the staging directory replaces ``out``; otherwise ``out`` is
left as it was and the partial run is kept in ``NAME.failed`` (:func:`profiler.launch_dirs.keep_failed`). The failing rank is the first to
fail (:mod:`profiler.launch_failures`). :func:`launch_command` gives the torchrun line to run on
every node of a multi-node job. Torch is not imported here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from profiler.launch_dirs import (
    LOG_NAME,
    check_out,
    clean_stale,
    failed_path,
    keep_failed,
    promote,
    staging_path,
)
from profiler.launch_failures import ExitWatch, TorchrunReport, first_failure, read_error_records
from profiler.launch_stop import TERM_GRACE_S, descendants, stop_tree
from profiler.launch_traces import trace_problem
from profiler.trainer.args import config_to_argv
from profiler.trainer.config import TrainConfig
from profiler.trainer.files import MANIFEST, PIDS_DIR, trace_name

GRACE_S = TERM_GRACE_S  # stopping: SIGTERM to every process group, then SIGKILL after this long
_AGENT_GRACE_S = 3.0  # beyond GRACE_S: how long the agent gets to stop everything itself


@dataclass(frozen=True, kw_only=True)
class ProfileRun:
    """Outcome of one launch.

    Attributes:
        out_dir: where the recording is: ``out`` after a success, ``NAME.failed`` otherwise.
        returncode: the launch's exit code (torchrun's; 128 + N when stopped by signal N).
        wall_time_s: launch wall-clock time, process start to exit.
        timed_out: the launch was stopped at the timeout.
        traces: the trace files present after the run (ranks that finished).
        manifest: the manifest (written by rank 0 after a successful run), or None.
        errors: per failed rank, its one-line error (``Type: message``), earliest first.
        interrupted: the signal (SIGINT or SIGTERM) that stopped the launch, or None.
        first_failure: the rank that failed first and how, or None.
        requested_out: the ``out`` directory asked for (unchanged unless the run succeeded).
        incomplete: why the recording is not whole although every rank exited 0 (a trace cut
            short by a full disk), or None.
    """

    out_dir: Path
    returncode: int
    wall_time_s: float
    timed_out: bool
    traces: list[Path]
    manifest: dict[str, Any] | None
    errors: dict[int, str] = field(default_factory=dict)
    interrupted: signal.Signals | None = None
    first_failure: tuple[int, str] | None = None
    requested_out: Path | None = None
    incomplete: str | None = None

    @property
    def ok(self) -> bool:
        """Every rank finished, the manifest was written and every rank's trace parses."""
        return (self.returncode == 0 and self.manifest is not None and not self.timed_out
                and self.interrupted is None and self.incomplete is None)

    @property
    def log_path(self) -> Path:
        """The combined output of torchrun and the ranks."""
        return self.out_dir / LOG_NAME

    def failure(self) -> str | None:
        """One line saying why the run failed (the first failing rank and its error), or None."""
        if self.ok:
            return None
        if self.interrupted is not None:
            return (f"interrupted by {self.interrupted.name}: stopped torchrun and every rank; "
                    f"{self._kept()}")
        if self.timed_out:
            return f"timed out after {self.wall_time_s:.0f} s; see {self.log_path}"
        if self.incomplete is not None:
            return f"the recording is incomplete: {self.incomplete}; {self._kept()}"
        failed = self.first_failure or next(iter(self.errors.items()), None)
        if failed is not None:
            return f"rank {failed[0]} failed: {failed[1]}{self._elsewhere()}"
        return f"torchrun exited with code {self.returncode}; see {self.log_path}"

    def _elsewhere(self) -> str:
        """Where the partial run went when not to ``NAME.failed`` (a directory trainsim did not make)."""
        out = self.requested_out
        if out is None or self.out_dir == failed_path(out):
            return ""
        return f" (partial run kept in {self.out_dir}: {failed_path(out).name} is not trainsim's)"

    def _kept(self) -> str:
        out = self.requested_out or self.out_dir
        previous = "previous recording unchanged" if out.exists() else "nothing written"
        return f"{previous} in {out}, partial run in {self.out_dir}"


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


def worker_env(config: TrainConfig) -> dict[str, str]:
    """Environment of torchrun: one CPU thread per rank, unbuffered output, importable repo."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def require_torch(command: str) -> None:
    """One line (exit 2) instead of ModuleNotFoundError where the torch extra is missing."""
    if importlib.util.find_spec("torch") is None:
        raise ValueError(f"{command} needs PyTorch, which is not installed: pip install 'trainsim[torch]'")


class _Signals:
    """SIGINT/SIGTERM handlers for the launch (main thread only): they note the signal; the
    launch loop stops everything. A second signal while stopping is noted and ignored, and so is
    any later one once a signal stopped the launch: every caller then reports the interrupt in
    one line and exits, and a repeated Ctrl-C landing between the launch's end and the process's
    exit would otherwise kill it mid-report (exit -2 instead of 130)."""

    def __init__(self) -> None:
        self.received: list[signal.Signals] = []
        self._old: dict[signal.Signals, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum))

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, signal.SIG_IGN if self.received else old)

    @property
    def first(self) -> signal.Signals | None:
        return self.received[0] if self.received else None


def run_profile(config: TrainConfig, out_dir: Path, *, timeout_s: float = 600.0,
                on_line: Callable[[str], None] | None = None) -> ProfileRun:
    """Run ``config`` under torchrun on this machine; the recording replaces ``out_dir`` only
    if the run succeeds (see the module docstring)."""
    if out_dir.name in ("", ".", ".."):  # "." has no name to stage beside: use the absolute path
        out_dir = out_dir.resolve()
    check_out(out_dir)
    clean_stale(out_dir)
    staging = staging_path(out_dir)
    staging.mkdir()
    start_s = time.monotonic()
    report = TorchrunReport()

    def line_seen(line: str) -> None:
        report.feed(line)
        if on_line is not None:
            on_line(line)

    with _Signals() as signals:  # kept through the renames below: a signal then is noted, not raised
        try:
            proc, timed_out, watch = _launch(config, staging, start_s + timeout_s, line_seen,
                                             lambda: bool(signals.received))
        except BaseException:
            keep_failed(staging, out_dir)
            raise
        interrupted = signals.first  # signals after torchrun ended do not undo a finished run
        wall_s = time.monotonic() - start_s
        first = first_failure(read_error_records(staging), watch.exit_unix_s, report.exit_codes)
        manifest = _manifest(staging)
        ended = proc.returncode == 0 and manifest is not None and not timed_out and interrupted is None
        incomplete = trace_problem(staging, config.world_size) if ended else None
        final = promote(staging, out_dir) if ended and incomplete is None else keep_failed(staging, out_dir)
    return ProfileRun(out_dir=final, returncode=proc.returncode, wall_time_s=wall_s,
                      timed_out=timed_out, traces=_traces(final, config.world_size),
                      manifest=manifest, errors=read_errors(final), interrupted=interrupted,
                      first_failure=first, requested_out=out_dir, incomplete=incomplete)


def _launch(config: TrainConfig, staging: Path, deadline_s: float, on_line: Callable[[str], None],
            stop: Callable[[], bool]) -> tuple[subprocess.Popen[str], bool, ExitWatch]:
    """Run torchrun (through the agent) recording into ``staging`` until it ends, the deadline
    passes or ``stop()``; stop whatever is left. Returns the agent's process (exited), whether the
    deadline passed, and the rank exit watch."""
    watch = ExitWatch(staging).start()
    try:
        with open(staging / LOG_NAME, "w", buffering=1) as log:
            proc = subprocess.Popen(agent_argv(torchrun_argv(config, staging)), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=worker_env(config),
                                    start_new_session=True)
            try:
                timed_out = _pump(proc, log, deadline_s=deadline_s, on_line=on_line, stop=stop)
            finally:
                if proc.poll() is None or descendants(proc.pid):
                    _stop(proc, staging)
                proc.wait()
    finally:
        watch.stop()
    return proc, timed_out, watch


def agent_argv(command: list[str]) -> list[str]:
    """``command`` run through :mod:`profiler.launch_agent` (stops it if this process dies)."""
    return [sys.executable, "-m", "profiler.launch_agent", str(os.getpid()), "--", *command]


def _pump(proc: subprocess.Popen[str], log: IO[str], *, deadline_s: float,
          on_line: Callable[[str], None] | None, stop: Callable[[], bool]) -> bool:
    """Copy output lines to ``log`` and ``on_line`` until exit or ``stop()``; True if the
    deadline passed."""
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None  # noqa: S101 - set by Popen(stdout=PIPE)
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    while True:
        if stop():
            return False
        try:
            line = lines.get(timeout=max(0.0, min(0.1, deadline_s - time.monotonic())))
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
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)


def _stop(proc: subprocess.Popen[str], out_dir: Path) -> None:
    """Stop the agent (it stops torchrun and the ranks); if it has not within the grace, stop
    them all from here: every process group of the launch SIGTERM, then SIGKILL."""
    rank_pids = _rank_pids(out_dir)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=GRACE_S + _AGENT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    stop_tree(proc, extra_pids=_rank_pids(out_dir) + rank_pids, grace_s=0.5)


def _rank_pids(out_dir: Path) -> list[int]:
    pids = []
    for path in (out_dir / PIDS_DIR).glob("rank*.pid"):
        try:
            pids.append(int(path.read_text()))
        except (OSError, ValueError):
            continue
    return pids


def _traces(out_dir: Path, world_size: int) -> list[Path]:
    return [out_dir / trace_name(r) for r in range(world_size) if (out_dir / trace_name(r)).exists()]


def _manifest(out_dir: Path) -> dict[str, Any] | None:
    """Rank 0's manifest, or None when it is missing or cut short (a full disk)."""
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def read_errors(out_dir: Path) -> dict[int, str]:
    """Per-rank one-line errors the workers recorded, earliest first."""
    records = sorted(read_error_records(out_dir).values(), key=lambda r: (r.time_unix_s, r.rank))
    return {r.rank: r.text for r in records}
