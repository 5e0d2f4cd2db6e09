"""Interrupting a real ``trainsim profile`` (torchrun, gloo CPU ranks) with real signals.

SIGINT (twice) and SIGTERM: the launcher stops torchrun and every rank, prints one line and
exits 130 / 143; SIGKILL: the launch agent, told by the kernel that its parent died, stops them.
In every case no process of the launch is left (every pid gone, ``killpg`` on torchrun's group
raises ProcessLookupError) and the previous recording in ``--out`` is byte-identical. Killing
rank 0 names rank 0 (not the ranks whose collectives it broke) within 4 s; SIGKILLing rank 1
before it has written its pid file names rank 1 and SIGKILL (not rank 0, which torchrun then
stopped with SIGTERM). Under a full disk (``ulimit -f``) the run fails with one line and the
previous recording stays.
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")

from profiler.launch_dirs import FAILED_MARK  # noqa: E402
from profiler.launch_stop import alive, descendants  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0


def fingerprint(directory: Path) -> dict[str, str]:
    """sha256 of every file below ``directory`` by relative path."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def previous_recording(out: Path) -> dict[str, str]:
    """A recording-shaped ``out`` (the files a run writes) standing for an earlier run."""
    out.mkdir()
    (out / "rank0.json.gz").write_bytes(os.urandom(256))
    (out / "manifest.json").write_text('{"world_size": 1, "earlier": true}\n')
    (out / "launch.log").write_text("an earlier run\n")
    return fingerprint(out)


def start(out: Path, *flags: str, preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "sim.cli.main", "profile", "--device", "cpu",
                             "--warmup-steps", "0", "--out", str(out), *flags], preexec_fn=preexec_fn,
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_ranks(proc: subprocess.Popen[str], out: Path, world: int) -> dict[int, int]:
    """Rank pids (from the staging directory) once every rank has started training."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        files = list(out.parent.glob(f".{out.name}.partial-{proc.pid}-*/pids/rank*.pid"))
        logs = list(out.parent.glob(f".{out.name}.partial-{proc.pid}-*/launch.log"))
        if len(files) == world and logs and "step 1/" in logs[0].read_text():
            return {int(p.stem[4:]): int(p.read_text()) for p in files}
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the ranks did not start within {START_TIMEOUT_S} s")


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.05)
    return {p for p in pids if alive(p)}


def group_gone(group: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def launch_processes(proc: subprocess.Popen[str]) -> tuple[set[int], int]:
    """Every process below the launcher and the agent's process group (torchrun's)."""
    below = descendants(proc.pid)
    agents = [p for p in below if "profiler.launch_agent" in Path(f"/proc/{p}/cmdline").read_bytes().decode()]
    assert len(agents) == 1
    return below, os.getpgid(agents[0])


@pytest.mark.parametrize("signals", [pytest.param((signal.SIGINT, signal.SIGINT), marks=pytest.mark.slow),
                                     pytest.param((signal.SIGTERM,), marks=pytest.mark.slow),
                                     pytest.param((signal.SIGKILL,), marks=pytest.mark.slow)],
                         ids=["sigint-twice", "sigterm", "sigkill"])
def test_interrupt_stops_everything_and_keeps_the_previous_recording(
        tmp_path: Path, signals: tuple[signal.Signals, ...]) -> None:
    out = tmp_path / "run"
    before = previous_recording(out)
    proc = start(out, "--dp", "2", "--steps", "1000")
    ranks = wait_for_ranks(proc, out, 2)
    below, group = launch_processes(proc)
    assert set(ranks.values()) <= below  # the ranks run below the launcher
    for k, sig in enumerate(signals):
        if k:
            time.sleep(0.3)
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if signals[0] == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + signals[0]
        lines = err.splitlines()  # exactly one line, no blank line from a progress bar
        assert len(lines) == 1, err
        assert lines[0].startswith(f"trainsim profile: error: interrupted by {signals[0].name}")
    assert not wait_gone(below, 20.0 if signals[0] == signal.SIGKILL else 1.0)
    if signals[0] == signal.SIGKILL:  # the orphaned agent's zombie is init's to reap
        group_gone(group, 5.0)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
    assert fingerprint(out) == before
    if signals[0] != signal.SIGKILL:  # the launcher cleaned its staging directory
        assert not list(tmp_path.glob(".run.partial-*"))
        assert (tmp_path / "run.failed" / "launch.log").is_file()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.slow
def test_killing_rank_0_names_rank_0(tmp_path: Path, world: int) -> None:
    out = tmp_path / "run"
    before = previous_recording(out)
    proc = start(out, "--dp", str(world), "--steps", "1000")
    ranks = wait_for_ranks(proc, out, world)
    below, group = launch_processes(proc)
    os.kill(ranks[0], signal.SIGKILL)
    killed_s = time.monotonic()
    _, err = proc.communicate(timeout=60)
    # 4 s on an idle machine (torchrun notices in 0.1 s and stops the other ranks); a run queue
    # longer than the cores (other jobs) stretches every step of that alike
    assert time.monotonic() - killed_s < 4.0 * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == "trainsim profile: error: rank 0 failed: killed by SIGKILL"
    assert not wait_gone(below, 1.0)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
    assert fingerprint(out) == before


def rank_process(world_rank: int, launcher: int) -> int | None:
    """The pid of the trainer process torchrun started as ``world_rank`` below ``launcher``, found
    in /proc by its environment (before it has written its pid file). Only this launch's processes:
    another run's trainer on the machine (another test, another user) is never the one killed."""
    for entry in (Path(f"/proc/{pid}") for pid in descendants(launcher)):
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"profiler.trainer" in argv and f"RANK={world_rank}".encode() in env:
            return int(entry.name)
    return None


@pytest.mark.slow
def test_sigkill_to_rank_1_early_names_rank_1_and_sigkill(tmp_path: Path) -> None:
    out = tmp_path / "run"
    before = previous_recording(out)
    proc = start(out, "--dp", "2", "--steps", "1000")
    deadline = time.monotonic() + START_TIMEOUT_S
    while (pid := rank_process(1, proc.pid)) is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == "trainsim profile: error: rank 1 failed: killed by SIGKILL", err
    assert fingerprint(out) == before


FSIZE_LIMIT = 200 * 1024  # bytes, `ulimit -f 200`: a tiny 2-rank trace is ~4 MB of JSON before gzip


def file_size_limit() -> None:
    """In the child: `ulimit -f 200`, SIGXFSZ ignored (a write past the limit fails with EFBIG)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.slow
def test_a_full_disk_fails_the_run_and_keeps_the_previous_recording(tmp_path: Path) -> None:
    out = tmp_path / "run"
    before = previous_recording(out)
    proc = start(out, "--dp", "2", "--steps", "2", preexec_fn=file_size_limit)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "disk full or file-size limit" in lines[0], err
    assert fingerprint(out) == before
    assert (tmp_path / "run.failed" / FAILED_MARK).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run.failed"]  # no staging left behind
    assert not [p for p in (tmp_path / "run.failed").iterdir() if p.name.endswith(".tmp")]
