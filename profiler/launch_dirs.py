"""Where a launch records: a hidden staging directory beside ``--out``, promoted only on success.

A run records into ``.NAME.partial-PID-XXXX`` (same parent as ``--out``, so renames are atomic
on one file system). On success the previous ``--out`` (if any) is renamed aside to
``.NAME.old-PID-XXXX``, the staging directory renamed to ``--out``, and the old one deleted; on
failure ``--out`` is left byte-identical and the partial run is kept in ``NAME.failed/``, marked
as trainsim's by a ``.trainsim-failed-run`` file: a later failure replaces a ``NAME.failed/``
only with that mark; a path of that name trainsim did not make is kept and the run goes to the
first ``NAME.failed-K`` (K = 2, 3, ...) that is free or trainsim's. Staging and aside directories of launches whose process is
gone are cleaned at the next launch (an aside directory whose ``--out`` is missing is put back:
the launcher died between the two renames). ``--out`` must be new (in an existing directory),
empty, or a recording: a directory holding other files, a file or a special file is refused
rather than replaced (:func:`sim.atomic.check_output`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

from profiler.trainer.files import ERRORS_DIR, MANIFEST, PIDS_DIR, remove_temp_files
from sim.atomic import OutputKind, check_output, is_temp_file, write_text_atomic

LOG_NAME = "launch.log"
FAILED_SUFFIX = ".failed"
FAILED_MARK = ".trainsim-failed-run"
_RECORDING_FILES = re.compile(r"rank\d+\.json\.gz|" + re.escape(MANIFEST) + "|"
                              + re.escape(LOG_NAME) + "|" + re.escape(FAILED_MARK))
_RECORDING_DIRS = (ERRORS_DIR, PIDS_DIR)


def _hidden(out: Path, kind: str) -> re.Pattern[str]:
    return re.compile(re.escape(f".{out.name}.{kind}-") + r"(\d+)-[0-9a-f]{4}")


def staging_path(out: Path) -> Path:
    """A new hidden staging directory name beside ``out`` (this process's pid and a random tag)."""
    return out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(2)}"


def failed_path(out: Path) -> Path:
    """Where a failed run's partial recording is kept: ``NAME.failed`` beside ``out``."""
    return out.parent / f"{out.name}{FAILED_SUFFIX}"


def foreign_files(out: Path) -> list[str]:
    """Names in ``out`` that a recording does not hold (empty: ``out`` may be replaced)."""
    if not out.exists():
        return []
    if not out.is_dir():
        return [out.name]
    return sorted(p.name for p in out.iterdir()
                  if not (p.is_dir() and p.name in _RECORDING_DIRS)
                  and not (p.is_file() and (_RECORDING_FILES.fullmatch(p.name) or is_temp_file(p))))


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that is not a directory (or a new one in an existing directory) or
    holds files a recording does not (one line, exit 2)."""
    check_output(out, "--out", OutputKind.DIRECTORY)
    foreign = foreign_files(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"--out={str(out)!r} is invalid: it holds files trainsim profile did not write ({shown}); "
                         "expected a new, empty or recording directory")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out: Path) -> list[Path]:
    """Remove staging directories of dead launches beside ``out``; put an aside copy back if
    ``out`` is missing (else delete it). Returns what was removed."""
    removed: list[Path] = []
    if not out.parent.is_dir():
        return removed
    partial, old = _hidden(out, "partial"), _hidden(out, "old")
    for path in sorted(out.parent.iterdir()):
        for pattern in (partial, old):
            match = pattern.fullmatch(path.name)
            if match is None or _pid_alive(int(match.group(1))):
                continue
            if pattern is old and not out.exists():
                os.replace(path, out)
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def promote(staging: Path, out: Path) -> Path:
    """Make ``staging`` the new ``out``: the old ``out`` renamed aside, then deleted."""
    remove_temp_files(staging)
    shutil.rmtree(staging / PIDS_DIR, ignore_errors=True)
    aside = None
    if out.exists():
        aside = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(2)}"
        os.replace(out, aside)
    os.replace(staging, out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return out


def keep_failed(staging: Path, out: Path) -> Path:
    """Move a failed run's staging directory to ``NAME.failed`` (replacing an older one of
    trainsim's), or to the first ``NAME.failed-K`` free or trainsim's; returns where it went."""
    remove_temp_files(staging)
    shutil.rmtree(staging / PIDS_DIR, ignore_errors=True)
    try:
        write_text_atomic(staging / FAILED_MARK, "a failed `trainsim profile` run: the next failure replaces it\n")
    except OSError:  # a full disk: without the mark a later failure keeps this one and goes elsewhere
        pass
    failed = _failed_slot(out)
    if os.path.lexists(failed):
        aside = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(2)}"
        os.replace(failed, aside)
        shutil.rmtree(aside, ignore_errors=True)
    os.replace(staging, failed)
    return failed


def is_failed_run(path: Path) -> bool:
    """Whether ``path`` is a failed-run directory trainsim made (a real directory with its mark)."""
    return path.is_dir() and not path.is_symlink() and (path / FAILED_MARK).is_file()


def _failed_slot(out: Path) -> Path:
    """``NAME.failed``, else ``NAME.failed-2``, ``-3``, ...: the first that is free or trainsim's."""
    candidates = (failed_path(out), *(out.parent / f"{out.name}{FAILED_SUFFIX}-{k}" for k in range(2, 10_000)))
    for path in candidates:
        if not os.path.lexists(path) or is_failed_run(path):
            return path
    raise OSError(f"no free name for the failed run beside {out} ({out.name}{FAILED_SUFFIX}-2 to -9999 taken)")
