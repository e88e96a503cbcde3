"""Host files of the sandboxes: replaced durably, and private to the user whatever the umask.

``write_durably`` replaces a file so that a crash leaves either the old bytes or the new: written
to a temporary name in the same directory (``.<name>.<pid>.tmp``), fsynced, renamed over the
target, and the directory fsynced (what supervisor records and snapshot refs rely on). A write
that fails (a full disk) removes its temporary file before it raises; a writer killed before its
rename leaves it behind, and ``remove_orphaned_temps`` deletes those for a caller that knows no
writer is active there. ``private_dir`` makes a directory. Every directory made here is 0700 and
every file 0600, set explicitly, so neither a loose nor a strict umask changes them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_TEMP = ".tmp"
DIR_MODE = 0o700
FILE_MODE = 0o600


def write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}{_TEMP}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """``path`` as a directory: each missing one (parents too) made 0700, and ``path`` itself
    tightened to 0700 when it already existed (not with ``tighten=False``: a directory the user
    named). Returns ``path``."""
    missing: list[Path] = []
    here = path
    while not here.is_dir():
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
        os.chmod(directory, DIR_MODE)
    if tighten:
        os.chmod(path, DIR_MODE)
    return path


def remove_orphaned_temps(directory: Path) -> None:
    """Delete the temporary files of ``write_durably`` calls that died in ``directory``. Only
    while no ``write_durably`` can be running there (under the lock every writer takes)."""
    for tmp in directory.glob(f".*{_TEMP}"):
        tmp.unlink(missing_ok=True)
