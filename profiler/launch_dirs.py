"""Where a launch records: a hidden staging directory beside ``--out``, promoted only on success.

A run records into ``.NAME.partial-PID-XXXX`` (same parent as ``--out``, so renames are atomic
on one file system). On success the previous ``--out`` (if any) is renamed aside to
``.NAME.old-PID-XXXX``, the staging directory renamed to ``--out``, and the old one deleted; on
failure ``--out`` is left byte-identical and the partial run is kept in ``NAME.failed/`` (the
previous ``NAME.failed/`` replaced). Staging and aside directories of launches whose process is
gone are cleaned at the next launch (an aside directory whose ``--out`` is missing is put back:
the launcher died between the two renames). ``--out`` must be new, empty, or a recording: a
directory holding other files is refused rather than replaced.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

from profiler.trainer.files import ERRORS_DIR, MANIFEST, PIDS_DIR, is_temp_file, remove_temp_files

LOG_NAME = "launch.log"
FAILED_SUFFIX = ".failed"
_RECORDING_FILES = re.compile(r"rank\d+\.json\.gz|" + re.escape(MANIFEST) + "|"
                              + re.escape(LOG_NAME))
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
    """Refuse an ``--out`` that is a file or holds files a recording does not (one line, exit 2)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={str(out)!r} is invalid: it is a file; expected a new, empty or recording directory")
    foreign = foreign_files(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"out={str(out)!r} is invalid: it holds files trainsim profile did not write ({shown}); "
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
    """Move a failed run's staging directory to ``NAME.failed`` (replacing an older one)."""
    remove_temp_files(staging)
    shutil.rmtree(staging / PIDS_DIR, ignore_errors=True)
    failed = failed_path(out)
    if failed.exists():
        aside = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(2)}"
        os.replace(failed, aside)
        shutil.rmtree(aside, ignore_errors=True)
    os.replace(staging, failed)
    return failed
