"""Writing output files: the one rule every file trainsim writes follows.

Where (:func:`check_output`, called by each command on every output path before any work, and
again by the writers here):

- an existing path must be a regular file or a symlink to one (written through: the file it
  names is replaced, the link kept). A FIFO, a character or block device, a socket, a directory
  or a dangling symlink is refused with a one-line ``ValueError`` naming the flag, the path and
  what is valid; it is never opened, replaced or unlinked.
- the file's directory must exist: it is never created here (a missing one is the same kind of
  error). Only a layout trainsim owns (a recording's staging directory, a sweep's own directory)
  is created by its writer.

How (:func:`write_bytes_atomic`, :func:`write_text_atomic`, :func:`write_with`): into a temporary
file beside the target (``.NAME.<8 hex>.tmp``), every write checked (a short write, ENOSPC,
EFBIG, EDQUOT raise), fsynced, then renamed over the target (``os.replace``). Data of a known
size is first checked against the free space of the file system and the file-size limit
(``ulimit -f``). On any error the temporary file is removed, the target is left byte-identical
(or absent), and the one-line ``OSError`` names the target and says so. The file gets the mode a
plain ``open(path, "w")`` would give it: 0666 minus the umask (0644 under the usual umask 022).
"""

from __future__ import annotations

import errno
import os
import re
import resource
import stat
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

FILE_MODE = 0o666  # before the umask, as open() creates files
_CHUNK_BYTES = 1 << 24  # one os.write at most (a short write is continued, never ignored)
_TEMP_RE = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp(\.tmp)?")  # (.tmp: an exporter's own temp of it)


class OutputKind(StrEnum):
    """What an output path names: a file, or a directory the command fills."""

    FILE = "file"
    DIRECTORY = "directory"


_EXPECTED = {OutputKind.FILE: "a regular file (or a symlink to one) to replace, or a new file name",
             OutputKind.DIRECTORY: "a directory, or a new directory name"}


def describe_node(mode: int) -> str:
    """What a file-system node is, from its ``st_mode`` (``a FIFO (named pipe)``, ``a directory``...)."""
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _invalid(flag: str, path: Path, why: str) -> ValueError:
    shown = str(path) if len(str(path)) <= 80 else str(path)[:79] + "…"
    return ValueError(f"{flag}={shown!r} is invalid: {why}")


def _existing_problem(path: Path, kind: OutputKind) -> str | None:
    """Why an existing ``path`` cannot be written as ``kind`` (None: it can). Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "it is a symlink to nothing"
    wanted = stat.S_ISREG if kind is OutputKind.FILE else stat.S_ISDIR
    if wanted(mode):
        return None
    link = "a symlink to " if path.is_symlink() else ""
    node = "a file" if kind is OutputKind.DIRECTORY and stat.S_ISREG(mode) else describe_node(mode)
    return f"it is {link}{node}"


def _directory_problem(directory: Path) -> str | None:
    """Why files cannot be created in ``directory`` (None: they can). Never creates it."""
    shown = str(directory) if str(directory) else "."
    if not directory.exists():
        return f"its directory {shown} does not exist (create it first)"
    if not directory.is_dir():
        return f"{shown} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"no permission to create files in {shown}"
    return None


def check_output(path: str | Path, flag: str = "output", kind: OutputKind = OutputKind.FILE) -> Path:
    """The path to write for ``path`` (a symlink to a regular file: the file it names), or a
    one-line ValueError (``flag='path' is invalid: it is a FIFO (named pipe); expected ...``)
    when it cannot be written (see the module docstring). A directory output may be new (the
    command creates it, not its parents) or existing."""
    given = Path(path)
    target = given
    if os.path.lexists(given):
        problem = _existing_problem(given, kind)
        if problem is not None:
            raise _invalid(flag, given, f"{problem}; expected {_EXPECTED[kind]}")
        if kind is OutputKind.DIRECTORY:
            return given
        target = given.resolve() if given.is_symlink() else given
    problem = _directory_problem(target.parent)
    if problem is not None:
        raise _invalid(flag, given, problem)
    return target


def temp_path(target: Path) -> Path:
    """A new temporary name beside ``target``: ``.NAME.<8 hex>.tmp``."""
    import secrets  # hashlib's OpenSSL: only for a command that writes a file

    return target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")


def is_temp_file(path: Path) -> bool:
    """Whether ``path`` is named like a temporary file of this module (``.NAME.<8 hex>.tmp``)."""
    return _TEMP_RE.fullmatch(path.name) is not None


def write_bytes_atomic(path: str | Path, data: bytes, *, flag: str = "output") -> Path:
    """Write ``data`` to ``path`` by the rule of the module docstring; returns the path written."""
    return _promote(check_output(path, flag), lambda tmp: _write_all(tmp, data), size=len(data))


def write_text_atomic(path: str | Path, text: str, *, flag: str = "output") -> Path:
    """UTF-8 text version of :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"), flag=flag)


def write_with(path: str | Path, fill: Callable[[Path], None], *, flag: str = "output") -> Path:
    """``fill(tmp)`` writes the content into the (created, empty) temporary file by name, e.g.
    an exporter that only takes a path; then the same checks, fsync and rename as
    :func:`write_bytes_atomic`. ``fill`` must raise if its content is incomplete."""
    return _promote(check_output(path, flag), fill, size=0)


def _promote(target: Path, fill: Callable[[Path], None], *, size: int) -> Path:
    existed = target.exists()
    tmp = temp_path(target)
    try:
        check_room(target.parent, size)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))  # the kernel applies the umask
        fill(tmp)
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            kept = "the previous file is unchanged" if existed else "nothing was written"
            raise os_error(exc.errno, f"cannot write {target}: {exc.strerror or exc}; {kept}") from None
        raise
    return target


def os_error(code: int | None, message: str) -> OSError:
    """An OSError with ``errno`` ``code`` whose text is ``message`` alone (no ``[Errno N]``)."""
    error = OSError(message)
    error.errno = code  # type: ignore[assignment]
    return error


def check_room(directory: Path, size: int) -> None:
    """Raise OSError (EFBIG, ENOSPC) if ``size`` bytes cannot be written in ``directory``: above
    the file-size limit (``ulimit -f``), or above the space free to this user."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and size > limit:
        raise os_error(errno.EFBIG, f"{size:,} bytes exceed the file-size limit of {limit:,} bytes (ulimit -f)")
    fs = os.statvfs(directory)
    if size > fs.f_bavail * fs.f_frsize:
        raise os_error(errno.ENOSPC, f"{size:,} bytes to write, {fs.f_bavail * fs.f_frsize:,} bytes free")


def _write_all(tmp: Path, data: bytes) -> None:
    """Write every byte of ``data`` to ``tmp`` (a short write is continued; no progress is ENOSPC)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view[:_CHUNK_BYTES])
            if written <= 0:
                raise OSError(errno.ENOSPC, "the write made no progress")
            view = view[written:]
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
